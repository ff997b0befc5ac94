"""What the user's parts report, the calls in flight as rollout and reflection events, and
the trace every part of the recorder writes to, from any thread.

gepa makes one adapter call and one reflection call at a time, so "the call in flight"
is well defined; what runs inside may run on any threads. A field left None is written
as unknown. A rollout the part reports is written with its own times; one it does not
is written when the call returns, spanning the call, untimed. When a call whose rollouts
are timed raises, a rollout still running is written up to the raise and one never
reported never started: it is not written.

A reflection's `prefix_tokens` is what its prompt shares with the previous one recorded
for its parent (prompt_prefix.py), so one that returns before an earlier job of its
parent waits for it; the prompt itself is never written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from pxn.runner.prompt_prefix import SharedPrefixes
from pxn.runner.recording.bookkeeping import ReflectionJob
from pxn.runner.redact import describe_error, redact
from pxn.trace import Event, Reflection, Rollout, TraceWriter


class TraceSink:
    """Writes events one at a time; after `close` (run_end), drops the late events of the
    user's threads still finishing a call after an interrupt."""

    def __init__(self, writer: TraceWriter):
        self._writer = writer
        self._closed = False
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        with self._lock:
            if not self._closed:
                self._writer.write(event)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._writer.close()


class Slots:
    """Small slot numbers for work in flight: each interval takes the lowest slot none of whose
    intervals it overlaps, so as many slots are used as were busy at once (for intervals
    reported in start order; reported out of order, at worst a few more)."""

    def __init__(self) -> None:
        self._busy: list[list[tuple[float, float]]] = []
        self._lock = threading.Lock()

    def take(self, start: float, end: float) -> int:
        with self._lock:
            for slot, intervals in enumerate(self._busy):
                if all(e <= start or end <= s for s, e in intervals):
                    intervals.append((start, end))
                    return slot
            self._busy.append([(start, end)])
            return len(self._busy) - 1

    def forget_before(self, time: float) -> None:
        """Work that ended before `time` can overlap nothing reported from now on."""
        with self._lock:
            self._busy = [[(s, e) for s, e in slot if e > time] for slot in self._busy]


class InFlight:
    """The lowest slot free right now, for work timed as it starts and ends."""

    def __init__(self) -> None:
        self._busy: set[int] = set()
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[int]:
        with self._lock:
            slot = next(i for i in range(len(self._busy) + 1) if i not in self._busy)
            self._busy.add(slot)
        try:
            yield slot
        finally:
            with self._lock:
                self._busy.discard(slot)


@dataclass(frozen=True)
class RolloutReport:
    """One rollout as the part that ran it saw it; times on the recording's clock."""

    start: float
    end: float
    score: float | None = None
    slot: int | None = None  # its own slot (the trace's worker); None: the recorder assigns one
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1
    node: str | None = None
    task_id: str | None = None


@dataclass(frozen=True)
class ReflectionReport:
    """One reflection LM call as the LM saw it; times on the recording's clock."""

    start: float
    end: float
    text: str | None = None  # the reply (None when the call failed)
    slot: int | None = None
    # The prompt as one text (prompt_text); None when unseen. Never written: prompts may
    # hold user data, so only the prefix it shares with its parent's last prompt is counted.
    prompt: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1


@dataclass
class RolloutNote:
    """What a rollout timed by `rec.rollout` tells besides its times."""

    score: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    attempts: int = 1


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
        self._lock = threading.Lock()  # the call in flight (against late reports), the count
        # A call that raised has reported every rollout it started, or has them running in
        # `rollout()`: declared, or seen once the adapter times a rollout with `rollout()`.
        self._timed = reports_rollouts
        self._slots = Slots()
        self._in_flight = InFlight()
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
            with self._lock:
                call = self._call
                if call is not None and 0 <= index < len(call.tags):
                    call.running[index] = (start, slot)
                    self._timed = True
            error: str | None = None
            try:
                yield note
            except BaseException as exc:
                error = describe_error(exc)
                raise
            finally:
                # Each of the note's fields is one of RolloutReport's.
                report = RolloutReport(
                    start=start, end=self._clock(), slot=slot, error=error, **asdict(note)
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
        with self._lock:
            self.written += 1


def has_fence_pair(text: str) -> bool:
    """Whether gepa will find a new text in the reply: it takes what lies between the first
    and last ```, and without a pair the WHOLE reply, chatter included."""
    first = text.find("```")
    return first >= 0 and text.rfind("```") > first


@dataclass
class ReflectionCall:
    """One reflection LM call gepa made (`batch_complete` or a single prompt)."""

    iteration: int
    start: float
    jobs: list[ReflectionJob]  # one per prompt, in job order
    reported: set[int] = field(default_factory=set)
    held: dict[int, ReflectionReport | None] = field(default_factory=dict)  # awaiting a sibling
    counted: set[int] = field(default_factory=set)  # jobs whose prompt prefix was counted


class ReflectionCalls:
    def __init__(self, sink: TraceSink, clock: Callable[[], float]):
        self._sink = sink
        self._clock = clock
        self._call: ReflectionCall | None = None
        self._prefixes = SharedPrefixes()
        self._lock = threading.Lock()  # reflections report from the LM's threads
        self._slots = Slots()

    def begin(self, iteration: int, jobs: list[ReflectionJob]) -> None:
        """gepa asks the LM for one reply per job, in job order."""
        start = self._clock()
        self._slots.forget_before(start)
        self._call = ReflectionCall(iteration, start, jobs)

    def report(self, index: int, report: ReflectionReport | None) -> None:
        """`None`: the LM answered this prompt without a call (e.g. from an earlier reply)."""
        call = self._call
        if call is None or not 0 <= index < len(call.jobs):
            return
        self._take(call, index, report)

    def end(self, replies: Sequence[str] | None, error: str | None) -> list[ReflectionJob] | None:
        """The LM returned `replies` or raised `error` (failing every job not reported); the
        call's jobs, None when no call was in flight."""
        call, self._call = self._call, None
        if call is None:
            return None
        end = self._clock()
        for index in range(len(call.jobs)):
            text = replies[index] if replies is not None and index < len(replies) else None
            if index not in call.reported:
                report = ReflectionReport(start=call.start, end=end, text=text, error=error)
                self._take(call, index, report)
        return call.jobs

    def _take(self, call: ReflectionCall, index: int, report: ReflectionReport | None) -> None:
        """Count the prompt prefixes of the call's jobs in job order, parent by parent: a job
        waits for every earlier job of its parent; then write the reflections counted."""
        ready = []
        with self._lock:
            call.reported.add(index)
            call.held[index] = report
            for i in sorted(call.held):
                parent = call.jobs[i].parent
                earlier = (j for j in range(i) if call.jobs[j].parent == parent)
                if any(j not in call.counted for j in earlier):
                    continue
                r = call.held.pop(i)
                call.counted.add(i)
                if r is not None:
                    known = parent if parent.isdigit() else None
                    prefix = self._prefixes.tokens(
                        known, call.jobs[i].proposal, r.prompt, r.tokens_in
                    )
                    ready.append((i, r, prefix))
        for i, r, prefix_tokens in ready:
            self._write(call, i, r, prefix_tokens)

    def _write(
        self, call: ReflectionCall, index: int, r: ReflectionReport, prefix_tokens: int | None
    ) -> None:
        slot = r.slot if r.slot is not None else self._slots.take(r.start, r.end)
        job = call.jobs[index]
        self._sink.write(
            Reflection(
                start=r.start,
                end=r.end,
                iteration=call.iteration,
                slot=slot,
                proposal=job.proposal,
                parent=job.parent,
                tokens_in=r.tokens_in,
                tokens_out=r.tokens_out,
                cost=r.cost,
                error=None if r.error is None else redact(r.error),
                attempts=r.attempts,
                fenced=None if r.text is None or r.error else has_fence_pair(r.text),
                prefix_tokens=prefix_tokens,
            )
        )
