"""Reflections as trace events: the reflection call in flight and each of its jobs' replies.

gepa makes one reflection call at a time; the LM may answer on any threads,
in any order. A reflection's `prefix_tokens` is what its prompt shares with
the previous one recorded for its parent (prompt_prefix.py), so one that
returns before an earlier job of its parent waits for it; the prompt itself
is never written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pxn.runner.prompt_prefix import SharedPrefixes
from pxn.runner.recording.bookkeeping import ReflectionJob
from pxn.runner.recording.reports import ReflectionReport
from pxn.runner.recording.sink import Slots, TraceSink
from pxn.runner.redact import redact
from pxn.trace import Reflection


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
        call = self._call
        if call is None:
            return None
        self._call = None
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
