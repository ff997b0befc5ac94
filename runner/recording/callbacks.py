"""gepa's callbacks -> trace events: the callbacks object the recording gives gepa.

gepa 0.1.4 calls them on its main thread, between an iteration's stages; each
but the task bookkeeping means gepa has moved on from the rollout stage in
flight, which is then written. Only a merged program's subsample is evaluated
without traces, which is how a merge's stage is known.
"""

from __future__ import annotations

from typing import Any

from pxn.runner.recording.events import merge_proposal
from pxn.runner.recording.recorder import Recorder
from pxn.runner.redact import describe_error
from pxn.trace import Budget, Iteration, Validation


class GepaCallbacks:
    def __init__(self, recorder: Recorder):
        self._rec = recorder
        # Read by the live progress line.
        self.metric_calls = 0  # gepa's count, from on_budget_updated
        self.best_val: float | None = None

    def on_optimization_start(self, event: dict[str, Any]) -> None:
        self._rec.position.phase = "seed_val"

    def on_iteration_start(self, event: dict[str, Any]) -> None:
        rec = self._rec
        number = event["iteration"]
        rec.stages.new_iteration(number)
        rec.position.new_iteration(number, rec.clock(), event["state"])
        rec.labels.forget_children()
        rec.decisions.new_iteration(number)
        rec.merges.new_iteration(number)
        rec.no_proposals.new_iteration()

    def on_candidate_selected(self, event: dict[str, Any]) -> None:
        self._rec.position.book.parent_selected(event["candidate_idx"])

    def on_evaluation_start(self, event: dict[str, Any]) -> None:
        self._rec.settle()
        if not event["capture_traces"]:
            self._rec.position.phase = "merge_subsample"
            return
        parent = event["candidate_idx"] is not None
        self._rec.position.phase = "parent_minibatch" if parent else "child_minibatch"

    def on_evaluation_end(self, event: dict[str, Any]) -> None:
        self._rec.settle()

    def on_evaluation_skipped(self, event: dict[str, Any]) -> None:
        rec = self._rec
        book = rec.position.book
        rec.no_proposals.skipped(book, str(event.get("reason")), rec.clock())
        book.task_skipped()

    def on_error(self, event: dict[str, Any]) -> None:
        """gepa caught an exception in the iteration; it logs it and goes on."""
        self._rec.no_proposals.iteration_failed(describe_error(event["exception"]))

    def on_proposal_start(self, event: dict[str, Any]) -> None:
        self._rec.position.book.proposal_started()

    def on_proposal_end(self, event: dict[str, Any]) -> None:
        book, state = self._rec.position.book, self._rec.position.state
        task = book.proposal_ended()
        if task is None or state is None:
            return
        # The child is its parent with the new texts; remember it to label its rollouts.
        parent = state.program_candidates[book.task_parents[task]]
        child = {**parent, **event["new_instructions"]}
        self._rec.labels.child_proposed(child, book.proposal_id(task))

    def on_merge_attempted(self, event: dict[str, Any]) -> None:
        rec = self._rec
        rec.settle()
        rec.merges.attempted_now(list(event["parent_ids"]), rec.position.state, rec.clock())
        proposal = merge_proposal(rec.position.iteration)
        rec.labels.child_proposed(dict(event["merged_candidate"]), proposal)
        rec.position.phase = "full_val"  # gepa validates an accepted merge next

    def on_merge_accepted(self, event: dict[str, Any]) -> None:
        self._rec.settle()
        self._rec.merges.decided(accepted=True, candidate=event["new_candidate_idx"])

    def on_merge_rejected(self, event: dict[str, Any]) -> None:
        self._rec.merges.decided(accepted=False)

    def on_candidate_accepted(self, event: dict[str, Any]) -> None:
        rec = self._rec
        rec.settle()
        idx = event["new_candidate_idx"]
        rec.decisions.joined(rec.position.state.program_candidates[idx], idx)

    def on_valset_evaluated(self, event: dict[str, Any]) -> None:
        rec = self._rec
        rec.settle()
        score = event["average_score"]
        now = rec.clock()
        rec.sink.write(
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
        rec = self._rec
        rec.settle()
        self.metric_calls = event["metric_calls_used"]
        now = rec.clock()
        rec.sink.write(
            Budget(
                start=now,
                end=now,
                iteration=event["iteration"],
                metric_calls=int(event["metric_calls_used"]),
                delta=int(event["metric_calls_delta"]),
            )
        )

    def on_iteration_end(self, event: dict[str, Any]) -> None:
        rec = self._rec
        rec.settle()
        book = rec.position.book
        now = rec.clock()
        rec.stages.end_iteration(now)
        rec.decisions.end_iteration()
        rec.merges.end_iteration()
        rec.no_proposals.end_iteration(book, rec.decisions.judged_ids, rec.position.state, now)
        rec.sink.write(Iteration(start=book.start, end=now, iteration=book.number))
        rec.failures.iteration_ended(len(book.started), book.ended)

    def on_optimization_end(self, event: dict[str, Any]) -> None:
        self._rec.settle()
        self._rec.position.state = event["final_state"]
