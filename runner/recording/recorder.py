"""The recorder: what the wrapped parts report, turned into trace events by its parts.

gepa's callbacks do not show the seed validation, a single rollout or a
single reflection: the wrapped adapter, reflection LM and selection tell the
recorder of each call, and the callbacks move the same parts along. Each
part keeps one kind of event (events.py, rollouts.py, reflections.py); the
position is where gepa's loop is, the failures the stopper's count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from pxn.runner.recording.bookkeeping import Position
from pxn.runner.recording.events import Decisions, Merges, NoProposals, RolloutLabels, Stages
from pxn.runner.recording.reflections import ReflectionCalls
from pxn.runner.recording.reports import ReflectionReport, RolloutNote, RolloutReport
from pxn.runner.recording.rollouts import AdapterCalls
from pxn.runner.recording.sink import TraceSink
from pxn.runner.recording.stopping import Failures
from pxn.runner.redact import redact
from pxn.trace import Attempt, TraceWriter


class Recorder:
    def __init__(
        self,
        writer: TraceWriter,
        clock: Callable[[], float],
        labels: RolloutLabels,
        *,
        max_failures: int,
        reports_rollouts: bool = False,
    ):
        self.clock = clock
        self.sink = TraceSink(writer)
        self.position = Position()
        self.labels = labels
        self.stages = Stages(self.sink)
        self.rollouts = AdapterCalls(self.sink, clock, reports_rollouts=reports_rollouts)
        self.reflections = ReflectionCalls(self.sink, clock)
        self.decisions = Decisions(self.sink)
        self.merges = Merges(self.sink)
        self.no_proposals = NoProposals(self.sink)
        self.failures = Failures(max_failures)

    @property
    def phase(self) -> str:
        """The phase of the adapter call in flight (or the next one)."""
        return self.position.phase

    @property
    def iteration(self) -> int:
        return self.position.iteration

    def settle(self) -> None:
        """gepa has moved on: the rollout stage in flight, if any, is written."""
        self.stages.settle()

    # ---- the adapter wrapper's calls ----

    def begin_rollouts(self, items: Sequence[tuple[dict[str, str], Sequence[Any]]]) -> None:
        phase, state = self.position.phase, self.position.state
        start = self.clock()
        self.stages.open(phase, start)
        tags = self.labels.tags(items, phase, self.position.iteration, state)
        self.rollouts.begin(phase, self.position.iteration, start, tags)

    def report_rollout(self, index: int, report: RolloutReport) -> None:
        self.rollouts.report(index, report)

    def rollout(self, index: int) -> AbstractContextManager[RolloutNote]:
        return self.rollouts.rollout(index)

    def end_rollouts(self, scores: Sequence[float] | None, error: str | None) -> None:
        """The adapter call returned (`scores`, in gepa's order) or raised (`error`)."""
        end = self.rollouts.end(scores, error)
        if end is not None:
            self.stages.extend(end)
            self.failures.adapter_call_ended(error)

    def reflective_dataset_failed(self, error: str) -> None:
        """The adapter could not build a task's reflective dataset: gepa skips the task with no
        callback (it logs the exception), so the next proposal to start is the next task's."""
        book = self.position.book
        self.no_proposals.dataset_failed(book, error, self.clock())
        book.task_skipped()

    # ---- the reflection LM wrapper's calls ----

    def begin_reflections(self, count: int) -> None:
        """gepa asks the LM for `count` replies, one per reflection job, in job order."""
        book = self.position.book
        self.reflections.begin(book.number, book.next_jobs(count))

    def report_reflection(self, index: int, report: ReflectionReport | None) -> None:
        self.reflections.report(index, report)

    def end_reflections(self, replies: Sequence[str] | None, error: str | None) -> None:
        """The LM returned `replies` or raised `error`: a raise fails every job of the call."""
        jobs = self.reflections.end(replies, error)
        if jobs is None:
            return
        self.position.book.reflected(jobs, error)
        if error is not None:
            self.failures.failed(error)

    def report_attempt(
        self, *, call: str, slot: int, attempt: int, start: float, end: float, error: str
    ) -> None:
        """One failed try of an LM call ("rollout" or "reflection") that was retried or given up;
        `attempt` counts tries across the whole rollout or reflection."""
        phase = "reflection" if call == "reflection" else self.position.phase
        self.sink.write(
            Attempt(
                start=start,
                end=end,
                iteration=self.position.iteration,
                call=call,
                phase=phase,
                worker=slot,
                attempt=attempt,
                error=redact(error),
            )
        )

    # ---- the selection wrapper's report ----

    def selected(self, proposals: list[Any], chosen: list[Any]) -> None:
        self.stages.settle()
        self.decisions.judged(proposals, chosen, self.clock())
        self.position.phase = "full_val"  # gepa validates the chosen children next
