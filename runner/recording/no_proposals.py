"""Every task of an iteration that ended without a proposal gepa judged, as a no_proposal event.

gepa 0.1.4 logs these and goes on, so the recorder reads them off what it
sees (read from gepa's `proposer/reflective_mutation/reflective_mutation.py`,
`proposer/merge.py` and `core/engine.py`):

- on_evaluation_skipped names a skipped task's reason: its parent was
  perfect on the minibatch, or its evaluation returned no trajectories;
- the adapter wrapper sees make_reflective_dataset raise (gepa skips the task
  with no callback);
- a task whose reflection started and never ended in on_proposal_end failed
  in its reflection: the reflection wrappers saw its last try raise (DSPy's
  proposer on a reply it cannot parse or an empty instruction, an LM error),
  or it returned no new text (gepa drops a proposal of no texts silently);
- on_error tells an exception gepa caught and went on from
  (raise_on_exception=False): the tasks still unjudged were lost with it;
- gepa marks a merge it was due to try in the iteration's entry of its
  full_program_trace (`invoked_merge`); one with no `merged` found no pair, and
  the iteration then proposes as usual.

Each is written when the iteration ends, except the skips and the failed
reflective datasets, written as gepa moves past them.
"""

from __future__ import annotations

from typing import Any

from pxn.runner.recording.bookkeeping import IterationBook
from pxn.runner.recording.merges import merge_proposal
from pxn.runner.recording.sink import TraceSink
from pxn.runner.redact import redact
from pxn.trace import NoProposal


class NoProposals:
    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._written: set[int] = set()  # tasks of the iteration already accounted for
        self._error: str | None = None  # the exception gepa caught in this iteration

    def new_iteration(self) -> None:
        self._written = set()
        self._error = None

    def skipped(self, book: IterationBook, reason: str, now: float) -> None:
        """gepa skipped the next task of the iteration (`reason`: gepa's own word)."""
        reason = "perfect_parent" if reason == "all_scores_perfect" else "no_trajectories"
        self._write(book, book.task_cursor, reason, None, now)

    def dataset_failed(self, book: IterationBook, error: str, now: float) -> None:
        """The adapter raised building the next task's reflective dataset."""
        self._write(book, book.task_cursor, "reflective_dataset", error, now)

    def iteration_failed(self, error: str) -> None:
        """gepa caught `error` and ends the iteration (on_error)."""
        self._error = error

    def end_iteration(self, book: IterationBook, judged: set[str], state: Any, now: float) -> None:
        """The iteration ended: every task neither judged (`judged`: the proposal ids gepa's
        selection saw) nor written yet was lost, and a due merge gepa did not find is told."""
        for task in range(len(book.task_parents)):
            if task in self._written or book.proposal_id(task) in judged:
                continue
            if book.outcome.get(task) is False:
                reason, error = "reflection_failed", book.errors.get(task)
            elif self._error is not None:
                reason, error = "iteration_failed", self._error
            elif task in book.outcome and task not in book.proposed:
                reason, error = "no_texts", None
            else:  # stopped with the run (Ctrl-C): no verdict was due, nothing was lost
                continue
            self._write(book, task, reason, error, now)
        entry = state.full_program_trace[-1] if state is not None else {}
        if entry.get("invoked_merge") and not entry.get("merged"):
            self._sink.write(
                NoProposal(
                    start=now,
                    end=now,
                    iteration=book.number,
                    proposal=merge_proposal(book.number),
                    reason="merge_not_found",
                )
            )

    def _write(
        self, book: IterationBook, task: int, reason: str, error: str | None, now: float
    ) -> None:
        self._written.add(task)
        parent = book.task_parents[task] if task < len(book.task_parents) else None
        self._sink.write(
            NoProposal(
                start=now,
                end=now,
                iteration=book.number,
                proposal=book.proposal_id(task),
                parent=None if parent is None else str(parent),
                reason=reason,
                error=None if error is None else redact(error),
            )
        )
