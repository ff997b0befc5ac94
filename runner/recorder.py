"""What happened, as gepa tells it: callbacks -> trace events, and the phase of each batch.

gepa 0.1.4 calls callbacks on its main thread, between the stages of an
iteration. They give iteration boundaries, which tasks were sampled, which
proposals started and ended, and which children joined the pool. They do NOT
show the seed validation or the start of full validation: the adapter tags
those from the data split (a batch of valset items is a validation) and from
the selection wrapper below, which sees every proposal and gepa's verdict.

The recorder also counts reflections gepa swallowed (gepa 0.1.4 logs a failed
reflection and goes on, even with raise_on_exception=True): a proposal
that started but never ended failed silently; after `max_failures` in a row
the stopper ends the run instead of letting it burn its budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pxn.runner.retry import FailedAttempt
from pxn.trace import (
    Attempt,
    Budget,
    Decision,
    Event,
    Iteration,
    Stage,
    TraceWriter,
    Validation,
)


def candidate_key(candidate: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(candidate.items()))


@dataclass
class Pending:
    """A proposal judged by the selection step, waiting to learn its candidate index."""

    proposal: str
    parent: str
    key: tuple[tuple[str, str], ...]
    time: float
    before: float
    after: float
    selected: bool


@dataclass
class IterationBook:
    """Per-iteration bookkeeping, reset at each on_iteration_start."""

    number: int
    start: float
    task_parents: list[int] = field(default_factory=list)  # on_candidate_selected, in task order
    task_cursor: int = 0  # tasks seen in stage 3a (skipped or started)
    started: list[int] = field(default_factory=list)  # task indices whose reflection started
    outcomes: list[tuple[str, bool]] = field(default_factory=list)  # (proposal id, ok), job order
    ended: int = 0  # on_proposal_end count
    child_ids: list[str] = field(default_factory=list)  # proposal ids in on_proposal_end order
    reflection_start: float | None = None
    pending: list[Pending] = field(default_factory=list)
    expect: str = "parent_minibatch"  # phase of the next non-validation batch


class Recorder:
    """Shared by the adapter, the reflection LM and gepa's callbacks; writes the trace."""

    def __init__(
        self,
        writer: TraceWriter,
        clock: Callable[[], float],
        *,
        max_failures: int,
        on_change: Callable[[], None] | None = None,
    ):
        self.writer = writer
        self.clock = clock
        self.max_failures = max_failures
        self.on_change = on_change or (lambda: None)
        self.closed = False
        self.state: Any = None  # gepa's GEPAState, from on_iteration_start
        self.book = IterationBook(number=0, start=0.0)
        self.iterations = 0
        self.proposals = 0
        self.accepted = 0
        self.fenced_missing = 0
        self.consecutive_failures = 0
        self.failed_reflections = 0
        self.stop_reason: str | None = None
        self.last_reflection_error: str | None = None
        self.metric_calls = 0  # gepa's count, from on_budget_updated
        self.best_val: float | None = None
        self.child_of: dict[tuple[tuple[str, str], ...], str] = {}  # child key -> proposal id

    def write(self, event: Event) -> None:
        # After an interrupt, worker threads may still finish an LM call while the
        # trace is already closed by run_end: those late events are dropped.
        if not self.closed:
            self.writer.write(event)

    def close(self) -> None:
        self.closed = True
        self.writer.close()

    def write_attempt(
        self,
        failed: FailedAttempt,
        *,
        iteration: int,
        call: str,
        phase: str,
        slot: int,
        number: int,
    ) -> None:
        """One failed try of an LM call; `number` counts tries across the whole call."""
        self.write(
            Attempt(
                start=failed.start,
                end=failed.end,
                iteration=iteration,
                call=call,
                phase=phase,
                worker=slot,
                attempt=number,
                error=failed.error,
            )
        )

    # ---- what the adapter and the reflection LM ask ----

    @property
    def iteration(self) -> int:
        return self.book.number

    def candidate_label(self, candidate: dict[str, str]) -> str:
        """gepa's index for a pool member; the proposal id "i-j" for a child not yet in it."""
        key = candidate_key(candidate)
        if self.state is not None:
            for idx, cand in enumerate(self.state.program_candidates):
                if candidate_key(cand) == key:
                    return str(idx)
        return self.child_of.get(key, "?")

    def reflection_jobs(self, count: int) -> list[tuple[str, str]]:
        """(proposal id, parent index) of the next `count` reflections, in gepa's job order."""
        book = self.book
        issued = len(book.outcomes)
        jobs = []
        for task in book.started[issued : issued + count]:
            parent = book.task_parents[task] if task < len(book.task_parents) else -1
            jobs.append((f"{book.number}-{task}", str(parent)))
        while len(jobs) < count:  # gepa asked for more than we saw start: label honestly
            jobs.append((f"{book.number}-?", "?"))
        return jobs

    def reflection_outcome(self, proposal: str, ok: bool, error: str | None = None) -> None:
        self.book.outcomes.append((proposal, ok))
        if not ok:
            self.last_reflection_error = error

    def batch_started(self, phase: str) -> None:
        """A rollout batch begins: close the reflection stage if one was open."""
        book = self.book
        if phase == "child_minibatch" and book.reflection_start is not None:
            self.write(
                Stage(
                    start=book.reflection_start,
                    end=self.clock(),
                    iteration=book.number,
                    name="reflection",
                )
            )
            book.reflection_start = None

    def batch_ended(self, phase: str, end: float) -> None:
        if phase == "parent_minibatch":
            self.book.reflection_start = end
            self.book.expect = "child_minibatch"

    # ---- gepa callbacks (main thread) ----

    def on_iteration_start(self, event: dict[str, Any]) -> None:
        self.state = event["state"]
        self.book = IterationBook(number=event["iteration"], start=self.clock())
        self.child_of.clear()
        self.on_change()

    def on_candidate_selected(self, event: dict[str, Any]) -> None:
        self.book.task_parents.append(event["candidate_idx"])

    def on_evaluation_start(self, event: dict[str, Any]) -> None:
        self.book.expect = (
            "parent_minibatch" if event["candidate_idx"] is not None else "child_minibatch"
        )

    def on_evaluation_skipped(self, event: dict[str, Any]) -> None:
        self.book.task_cursor += 1

    def on_proposal_start(self, event: dict[str, Any]) -> None:
        self.book.started.append(self.book.task_cursor)
        self.book.task_cursor += 1

    def on_proposal_end(self, event: dict[str, Any]) -> None:
        book = self.book
        book.ended += 1
        self.proposals += 1
        ok_ids = [pid for pid, ok in book.outcomes if ok]
        pid = ok_ids[book.ended - 1] if book.ended <= len(ok_ids) else f"{book.number}-?"
        book.child_ids.append(pid)
        # The child is its parent with the new texts; remember it to label its rollouts.
        task = int(pid.split("-")[1]) if pid.split("-")[1].isdigit() else None
        if task is not None and self.state is not None and task < len(book.task_parents):
            parent = self.state.program_candidates[book.task_parents[task]]
            child = {**parent, **event["new_instructions"]}
            self.child_of.setdefault(candidate_key(child), pid)

    def on_candidate_accepted(self, event: dict[str, Any]) -> None:
        idx = event["new_candidate_idx"]
        key = candidate_key(self.state.program_candidates[idx])
        for pending in self.book.pending:
            if pending.selected and pending.key == key:
                self.book.pending.remove(pending)
                self._decide(pending, accepted=True, candidate=str(idx))
                break

    def on_valset_evaluated(self, event: dict[str, Any]) -> None:
        score = event["average_score"]
        now = self.clock()
        self.write(
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
        self.on_change()

    def on_budget_updated(self, event: dict[str, Any]) -> None:
        self.metric_calls = event["metric_calls_used"]
        now = self.clock()
        self.write(
            Budget(
                start=now,
                end=now,
                iteration=event["iteration"],
                metric_calls=int(event["metric_calls_used"]),
                delta=int(event["metric_calls_delta"]),
            )
        )
        self.on_change()

    def on_iteration_end(self, event: dict[str, Any]) -> None:
        book = self.book
        now = self.clock()
        if book.reflection_start is not None:  # reflections ran but no child was evaluated
            self.write(
                Stage(
                    start=book.reflection_start, end=now, iteration=book.number, name="reflection"
                )
            )
            book.reflection_start = None
        for pending in book.pending:
            self._decide(pending, accepted=False, candidate=None)
        book.pending.clear()
        self.write(Iteration(start=book.start, end=now, iteration=book.number))
        self.iterations += 1
        self._count_failures(len(book.started), book.ended)
        self.on_change()

    # ---- the selection wrapper's report ----

    def selected(self, proposals: list[Any], chosen: list[Any]) -> None:
        now = self.clock()
        chosen_ids = {id(p) for p in chosen}
        for p in proposals:
            self.book.pending.append(
                Pending(
                    proposal=str(p.metadata.get("proposal_id", "?")),
                    parent=",".join(str(i) for i in p.parent_program_ids),
                    key=candidate_key(p.candidate),
                    time=now,
                    before=float(sum(p.subsample_scores_before or [])),
                    after=float(sum(p.subsample_scores_after or [])),
                    selected=id(p) in chosen_ids,
                )
            )

    def _decide(self, pending: Pending, *, accepted: bool, candidate: str | None) -> None:
        self.accepted += accepted
        self.write(
            Decision(
                start=pending.time,
                end=pending.time,
                iteration=self.book.number,
                proposal=pending.proposal,
                parent=pending.parent,
                accepted=accepted,
                candidate=candidate,
                score_before=pending.before,
                score_after=pending.after,
            )
        )

    # ---- reflection failures gepa swallowed ----

    def _count_failures(self, started: int, ended: int) -> None:
        lost = started - ended
        self.failed_reflections += lost
        self.consecutive_failures = lost if ended > 0 else self.consecutive_failures + lost
        if self.consecutive_failures >= self.max_failures and self.stop_reason is None:
            last = (
                f" (last error: {self.last_reflection_error})" if self.last_reflection_error else ""
            )
            self.stop_reason = (
                f"stopped: {self.consecutive_failures} reflections in a row produced no "
                f"proposal{last}; check the reflection model"
            )

    def should_stop(self, state: Any) -> bool:
        """A gepa stopper: checked at the top of every iteration."""
        return self.stop_reason is not None


class RecordingSelection:
    """Wraps gepa's selection strategy to see every proposal and which were chosen."""

    def __init__(self, inner: Any, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder

    def select(self, proposals: list[Any], state: Any, acceptance_criterion: Any) -> list[Any]:
        chosen = self.inner.select(proposals, state, acceptance_criterion)
        self.recorder.selected(proposals, chosen)
        return chosen


class Stopper:
    """gepa's StopperProtocol over the recorder's verdict (a plain callable is enough)."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def __call__(self, state: Any) -> bool:
        return self.recorder.should_stop(state)


def perf_clock(offset: float = 0.0) -> Callable[[], float]:
    """Seconds since the run started (plus `offset` for a resumed run's earlier time)."""
    t0 = time.perf_counter()
    return lambda: offset + (time.perf_counter() - t0)
