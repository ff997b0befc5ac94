"""Rollouts as trace events: the adapter call in flight and each rollout of it.

gepa issues one adapter call at a time, so "the call in flight" is well
defined. A rollout the part reports is written with its own times; one it
does not is written when the call returns, spanning the call, untimed. When a
call whose rollouts are timed raises, a rollout still running is written up
to the raise and one never reported never started: it is not written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from pxn.runner.recording.reports import RolloutNote, RolloutReport
from pxn.runner.recording.sink import InFlight, Slots, TraceSink
from pxn.runner.redact import describe_error, redact
from pxn.trace import Rollout


@dataclass
class AdapterCall:
    """One adapter call gepa made: its examples, flattened in gepa's order."""

    phase: str
    iteration: int
    start: float
    tags: list[tuple[str, str]]  # (candidate label, example label) per rollout
    reported: set[int] = field(default_factory=set)
    running: dict[int, tuple[float, int]] = field(default_factory=dict)  # index -> start, slot


class AdapterCalls:
    def __init__(self, sink: TraceSink, clock: Callable[[], float], *, reports_rollouts: bool):
        self._sink = sink
        self._clock = clock
        self._call: AdapterCall | None = None
        self._lock = threading.Lock()  # the call in flight, against late reports
        # A call that raised has reported every rollout it started, or has them running in
        # `rollout()`: declared, or seen once the adapter times a rollout with `rollout()`.
        self._timed = reports_rollouts
        self._slots = Slots()
        self._in_flight = InFlight()
        self._count_lock = threading.Lock()
        self.written = 0  # rollouts written (read by the live progress line)

    def begin(self, phase: str, iteration: int, start: float, tags: list[tuple[str, str]]) -> None:
        self._slots.forget_before(start)
        self._call = AdapterCall(phase, iteration, start, tags)

    def report(self, index: int, report: RolloutReport) -> None:
        with self._lock:
            call = self._call
            if call is None or not 0 <= index < len(call.tags) or index in call.reported:
                return  # a late report after its call ended (an interrupt): nothing to attach to
            call.reported.add(index)
            call.running.pop(index, None)
        self._write(call, index, report)

    @contextmanager
    def rollout(self, index: int) -> Iterator[RolloutNote]:
        """Time one rollout of the call in flight where it runs; its slot is the lowest free
        while it runs. A raise inside is recorded as the rollout's error and goes on."""
        note = RolloutNote()
        with self._in_flight.slot() as slot:
            start = self._clock()
            self._started(index, start, slot)
            error: str | None = None
            try:
                yield note
            except BaseException as exc:
                error = describe_error(exc)
                raise
            finally:
                report = RolloutReport(
                    start=start,
                    end=self._clock(),
                    score=note.score,
                    slot=slot,
                    tokens_in=note.tokens_in,
                    tokens_out=note.tokens_out,
                    cost=note.cost,
                    error=error,
                    attempts=note.attempts,
                )
                self.report(index, report)

    def end(self, scores: Sequence[float] | None, error: str | None) -> float | None:
        """The adapter call returned (`scores`, in gepa's order) or raised (`error`); the time
        it ended, None when no call was in flight."""
        with self._lock:
            call, self._call = self._call, None
        if call is None:
            return None
        end = self._clock()
        for index in range(len(call.tags)):
            if index in call.reported:
                continue
            start, slot = call.running.get(index, (call.start, None))
            if error is not None and self._timed and index not in call.running:
                continue  # never started: it ran no work and held no slot
            score = scores[index] if scores is not None and index < len(scores) else None
            report = RolloutReport(start=start, end=end, score=score, slot=slot, error=error)
            self._write(call, index, report, timed=index in call.running)
        return end

    def _started(self, index: int, start: float, slot: int) -> None:
        with self._lock:
            call = self._call
            if call is not None and 0 <= index < len(call.tags):
                call.running[index] = (start, slot)
                self._timed = True

    def _write(self, call: AdapterCall, index: int, r: RolloutReport, timed: bool = True) -> None:
        slot = r.slot if r.slot is not None else self._slots.take(r.start, r.end)
        candidate, example = call.tags[index]
        self._sink.write(
            Rollout(
                start=r.start,
                end=r.end,
                iteration=call.iteration,
                phase=call.phase,
                worker=slot,
                candidate=candidate,
                example=example,
                score=None if r.score is None else float(r.score),
                tokens_in=r.tokens_in,
                tokens_out=r.tokens_out,
                cost=r.cost,
                error=None if r.error is None else redact(r.error),
                attempts=r.attempts,
                node=r.node,
                task_id=r.task_id,
                timed=timed,
            )
        )
        with self._count_lock:
            self.written += 1
