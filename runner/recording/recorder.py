"""The recorder: gepa's callbacks and what the wrapped parts report, turned into trace events.

gepa 0.1.4 calls its callbacks on its main thread, between an iteration's stages; they do
not show the seed validation, a single rollout or a single reflection, which the wrapped
adapter, reflection LM and selection tell. Each callback but the task bookkeeping means
gepa has moved on from the rollout stage in flight, which is then written; only a merged
program's subsample is evaluated without traces, which is how a merge's stage is known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pxn.runner.recording.bookkeeping import IterationBook
from pxn.runner.recording.calls import (
    AdapterCalls,
    ReflectionCalls,
    TraceSink,
)
from pxn.runner.recording.events import (
    Decisions,
    Merges,
    NoProposals,
    RolloutLabels,
    Stages,
    merge_proposal,
)
from pxn.runner.recording.stopping import Failures
from pxn.runner.redact import describe_error, redact
from pxn.trace import Attempt, Budget, Iteration, TraceWriter, Validation


class Recorder:
    """gepa's callback object. Each part keeps one kind of event (events.py, calls.py), the
    failures the stopper's count; the book, phase and state are where gepa's loop is."""

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
        self.book = IterationBook(number=0, start=0.0)
        self.phase = "seed_val"  # of the adapter call in flight (or the next one)
        self.state: Any = None  # gepa's GEPAState, once an iteration has started
        self.labels = labels
        self.stages = Stages(self.sink)
        self.rollouts = AdapterCalls(self.sink, clock, reports_rollouts=reports_rollouts)
        self.reflections = ReflectionCalls(self.sink, clock)
        self.decisions = Decisions(self.sink)
        self.merges = Merges(self.sink)
        self.no_proposals = NoProposals(self.sink)
        self.failures = Failures(max_failures)
        # Read by the live progress line.
        self.metric_calls = 0  # gepa's count, from on_budget_updated
        self.best_val: float | None = None

    @property
    def iteration(self) -> int:
        return self.book.number

    def begin_rollouts(self, items: Sequence[tuple[dict[str, str], Sequence[Any]]]) -> None:
        start = self.clock()
        self.stages.open(self.phase, start)
        tags = self.labels.tags(items, self.phase, self.iteration, self.state)
        self.rollouts.begin(self.phase, self.iteration, start, tags)

    def end_rollouts(self, scores: Sequence[float] | None, error: str | None) -> None:
        """The adapter call returned (`scores`, in gepa's order) or raised (`error`)."""
        end = self.rollouts.end(scores, error)
        if end is not None:
            self.stages.extend(end)
            self.failures.adapter_call_ended(error)

    def reflective_dataset_failed(self, error: str) -> None:
        """The adapter could not build a task's reflective dataset: gepa skips the task with no
        callback (it logs the exception), so the next proposal to start is the next task's."""
        self.no_proposals.dataset_failed(self.book, error, self.clock())
        self.book.task_skipped()

    def begin_reflections(self, count: int) -> None:
        """gepa asks the LM for `count` replies, one per reflection job, in job order."""
        self.reflections.begin(self.iteration, self.book.next_jobs(count))

    def end_reflections(self, replies: Sequence[str] | None, error: str | None) -> None:
        """The LM returned `replies` or raised `error`: a raise fails every job of the call."""
        jobs = self.reflections.end(replies, error)
        if jobs is None:
            return
        self.book.reflected(jobs, error)
        if error is not None:
            self.failures.failed(error)

    def report_attempt(
        self, *, call: str, slot: int, attempt: int, start: float, end: float, error: str
    ) -> None:
        """One failed try of an LM call ("rollout" or "reflection") that was retried or given up;
        `attempt` counts tries across the whole rollout or reflection."""
        phase = "reflection" if call == "reflection" else self.phase
        self.sink.write(
            Attempt(
                start=start,
                end=end,
                iteration=self.iteration,
                call=call,
                phase=phase,
                worker=slot,
                attempt=attempt,
                error=redact(error),
            )
        )

    def selected(self, proposals: list[Any], chosen: list[Any]) -> None:
        self.stages.settle()
        self.decisions.judged(proposals, chosen, self.clock())
        self.phase = "full_val"  # gepa validates the chosen children next

    def on_optimization_start(self, event: dict[str, Any]) -> None:
        self.phase = "seed_val"

    def on_iteration_start(self, event: dict[str, Any]) -> None:
        number = event["iteration"]
        self.stages.new_iteration(number)
        self.book = IterationBook(number=number, start=self.clock())
        self.state = event["state"]
        self.phase = "parent_minibatch"
        self.labels.forget_children()
        self.decisions.new_iteration(number)
        self.merges = Merges(self.sink, number)
        self.no_proposals = NoProposals(self.sink)

    def on_candidate_selected(self, event: dict[str, Any]) -> None:
        self.book.task_parents.append(event["candidate_idx"])

    def on_evaluation_start(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        if not event["capture_traces"]:
            self.phase = "merge_subsample"
            return
        parent = event["candidate_idx"] is not None
        self.phase = "parent_minibatch" if parent else "child_minibatch"

    def on_evaluation_end(self, event: dict[str, Any]) -> None:
        self.stages.settle()

    def on_evaluation_skipped(self, event: dict[str, Any]) -> None:
        self.no_proposals.skipped(self.book, str(event.get("reason")), self.clock())
        self.book.task_skipped()

    def on_error(self, event: dict[str, Any]) -> None:
        """gepa caught an exception in the iteration; it logs it and goes on."""
        self.no_proposals.iteration_failed(describe_error(event["exception"]))

    def on_proposal_start(self, event: dict[str, Any]) -> None:
        self.book.proposal_started()

    def on_proposal_end(self, event: dict[str, Any]) -> None:
        book, state = self.book, self.state
        task = book.proposal_ended()
        if task is None or state is None:
            return
        # The child is its parent with the new texts; remember it to label its rollouts.
        parent = state.program_candidates[book.task_parents[task]]
        child = {**parent, **event["new_instructions"]}
        self.labels.child_proposed(child, book.proposal_id(task))

    def on_merge_attempted(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        self.merges.attempted_now(list(event["parent_ids"]), self.state, self.clock())
        proposal = merge_proposal(self.iteration)
        self.labels.child_proposed(dict(event["merged_candidate"]), proposal)
        self.phase = "full_val"  # gepa validates an accepted merge next

    def on_merge_accepted(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        self.merges.decided(accepted=True, candidate=event["new_candidate_idx"])

    def on_merge_rejected(self, event: dict[str, Any]) -> None:
        self.merges.decided(accepted=False)

    def on_candidate_accepted(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        idx = event["new_candidate_idx"]
        self.decisions.joined(self.state.program_candidates[idx], idx)

    def on_valset_evaluated(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        score = event["average_score"]
        now = self.clock()
        self.sink.write(
            Validation(
                start=now,
                end=now,
                iteration=event["iteration"],
                candidate=str(event["candidate_idx"]),
                score=float(score),
                examples=int(event["num_examples_evaluated"]),
            )
        )
        if self.best_val is None or score > self.best_val:
            self.best_val = score

    def on_budget_updated(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        self.metric_calls = event["metric_calls_used"]
        now = self.clock()
        self.sink.write(
            Budget(
                start=now,
                end=now,
                iteration=event["iteration"],
                metric_calls=int(event["metric_calls_used"]),
                delta=int(event["metric_calls_delta"]),
            )
        )

    def on_iteration_end(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        book = self.book
        now = self.clock()
        self.stages.end_iteration(now)
        self.decisions.end_iteration()
        self.merges.end_iteration()
        self.no_proposals.end_iteration(book, self.decisions.judged_ids, self.state, now)
        self.sink.write(Iteration(start=book.start, end=now, iteration=book.number))
        self.failures.iteration_ended(len(book.started), book.ended)

    def on_optimization_end(self, event: dict[str, Any]) -> None:
        self.stages.settle()
        self.state = event["final_state"]
