"""gepa's loop as trace events: stages, merges, verdicts, lost proposals, rollout labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pxn.runner.recording.bookkeeping import IterationBook
from pxn.runner.recording.calls import TraceSink
from pxn.runner.redact import redact
from pxn.trace import Decision, Merge, NoProposal, Stage


def merge_proposal(iteration: int) -> str:
    """The merged program's name in its rollouts: gepa attempts one merge an iteration."""
    return f"{iteration}-merge"


class Merges:
    """gepa's merge of an iteration, judged on a validation subsample (the only evaluation
    gepa asks without traces), then accepted or not; its parents' and subsample scores and
    their common ancestor are in the iteration's entry of gepa's `full_program_trace`."""

    def __init__(self, sink: TraceSink, iteration: int = 0):
        self._sink = sink
        self._iteration = iteration
        self._pending: Merge | None = None  # its verdict not yet known

    def attempted_now(self, parents: list[int], state: Any, now: float) -> None:
        """gepa judged a merge of `parents` at `now`; `state` is its GEPAState."""
        entry = state.full_program_trace[-1] if state is not None else {}
        entities = entry.get("merged_entities")
        sums = [entry.get(key) for key in ("id1_subsample_scores", "id2_subsample_scores")]
        after = entry.get("new_program_subsample_scores")
        self._pending = Merge(
            start=now,
            end=now,
            iteration=self._iteration,
            proposal=merge_proposal(self._iteration),
            parents=",".join(str(p) for p in parents),
            ancestor=None if entities is None else str(entities[2]),
            accepted=False,
            score_before=None if None in sums else float(max(sum(s) for s in sums)),
            score_after=None if after is None else float(sum(after)),
        )

    def decided(self, accepted: bool, candidate: int | None = None) -> None:
        """gepa accepted the merge (it joined the pool as `candidate`) or rejected it."""
        pending, self._pending = self._pending, None
        if pending is not None:
            joined = None if candidate is None else str(candidate)
            self._sink.write(replace(pending, accepted=accepted, candidate=joined))

    def end_iteration(self) -> None:
        """A merge still waiting was not accepted."""
        self.decided(accepted=False)


class Stages:
    """A rollout stage spans the adapter calls of one phase (gepa's pair-by-pair fallback
    makes several) and is written when gepa moves on ("settled"). The reflection stage
    spans from the parent minibatch's end to the child minibatch's start, or to the
    iteration's end when no child was evaluated."""

    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._iteration = 0
        self._open: Stage | None = None
        self._reflection_start: float | None = None  # the parent minibatch's end

    def new_iteration(self, number: int) -> None:
        """gepa starts iteration `number`: the stage in flight was the last one's."""
        self.settle()
        self._iteration = number
        self._reflection_start = None

    def open(self, phase: str, start: float) -> None:
        """An adapter call of `phase` starts at `start`."""
        if self._open is not None and self._open.name == phase:
            return  # one more adapter call of the same stage (gepa's pair-by-pair fallback)
        self.settle()
        if phase == "child_minibatch" and self._reflection_start is not None:
            self._write("reflection", self._reflection_start, start)
            self._reflection_start = None
        self._open = Stage(start=start, end=start, iteration=self._iteration, name=phase)

    def extend(self, end: float) -> None:
        """An adapter call of the stage in flight returned at `end`."""
        if self._open is not None:
            self._open = replace(self._open, end=end)

    def settle(self) -> None:
        """Close the rollout stage in flight, if any: gepa has moved on."""
        stage, self._open = self._open, None
        if stage is None:
            return
        self._sink.write(stage)
        if stage.name == "parent_minibatch":
            self._reflection_start = stage.end

    def end_iteration(self, now: float) -> None:
        """The iteration ends at `now` (its rollout stage settled): reflections that ran with no
        child evaluated after them end here."""
        if self._reflection_start is not None:
            self._write("reflection", self._reflection_start, now)
            self._reflection_start = None

    def _write(self, name: str, start: float, end: float) -> None:
        self._sink.write(Stage(start=start, end=end, iteration=self._iteration, name=name))


CandidateKey = tuple[tuple[str, str], ...]


def candidate_key(candidate: dict[str, str]) -> CandidateKey:
    return tuple(sorted(candidate.items()))


class RolloutLabels:
    """The (candidate, example) labels of an adapter call's rollouts, in gepa's order.

    An example is "train/i" or "val/i", found by identity in the user's lists (gepa
    passes their items through). A candidate is gepa's index for a pool member, the
    proposal id "i-j" for a child not yet in the pool (even when its texts repeat a
    member's), and "i-merge" for a merged program until it is judged.
    """

    def __init__(self, trainset: Any, valset: Any):
        self._train = _positions(trainset)
        self._val = _positions(valset if valset is not None else trainset)
        self._child_of: dict[CandidateKey, str] = {}  # a child's key -> its proposal id

    def tags(
        self,
        items: Sequence[tuple[dict[str, str], Sequence[Any]]],
        phase: str,
        iteration: int,
        state: Any,
    ) -> list[tuple[str, str]]:
        """One (candidate, example) per rollout of the call, pairs flattened; `state` is gepa's
        GEPAState (None before the first iteration)."""
        tags = []
        for candidate, batch in items:
            if phase == "seed_val":
                label = "0"
            elif phase == "merge_subsample":
                label = merge_proposal(iteration)
            else:
                label = self._candidate(candidate, state)
            tags.extend((label, self._example(example, phase)) for example in batch)
        return tags

    def child_proposed(self, child: dict[str, str], proposal: str) -> None:
        """The child a proposal (or a merge) wrote, to label its rollouts before it joins the
        pool."""
        self._child_of.setdefault(candidate_key(child), proposal)

    def forget_children(self) -> None:
        """A new iteration: last iteration's children joined the pool or were dropped."""
        self._child_of.clear()

    def _candidate(self, candidate: dict[str, str], state: Any) -> str:
        """This iteration's child (or merge) first: one that repeats a pool member's texts
        is still the new program gepa evaluates (gepa does not compare a merge with the pool)."""
        key = candidate_key(candidate)
        if key in self._child_of:
            return self._child_of[key]
        if state is not None:
            for idx, cand in enumerate(state.program_candidates):
                if candidate_key(cand) == key:
                    return str(idx)
        return "?"

    def _example(self, example: Any, phase: str) -> str:
        val = phase in ("seed_val", "merge_subsample", "full_val")
        split, positions = ("val", self._val) if val else ("train", self._train)
        index = positions.get(id(example))
        return f"{split}/{'?' if index is None else index}"


def _positions(data: Any) -> dict[int, int]:
    if not isinstance(data, Sequence):
        return {}  # a gepa DataLoader: its items carry no position we can see
    return {id(item): i for i, item in enumerate(data)}


@dataclass
class Pending:
    """A proposal judged by gepa's selection, waiting to learn its candidate index."""

    decision: Decision  # rejected until it joins the pool
    key: CandidateKey
    selected: bool


class Decisions:
    """gepa's verdicts: a chosen child that joins the pool (on_candidate_accepted) is
    accepted; every proposal still waiting when its iteration ends was rejected."""

    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._iteration = 0
        self._pending: list[Pending] = []
        self.accepted = 0  # read by the live progress line
        self.judged_ids: set[str] = set()  # the iteration's proposals gepa's selection saw

    def new_iteration(self, number: int) -> None:
        self._iteration = number
        self._pending = []
        self.judged_ids = set()

    def judged(self, proposals: list[Any], chosen: list[Any], now: float) -> None:
        """gepa's selection saw `proposals` (gepa's CandidateProposal) and chose `chosen`."""
        chosen_ids = {id(p) for p in chosen}
        for p in proposals:
            decision = Decision(
                start=now,
                end=now,
                iteration=self._iteration,
                proposal=str(p.metadata.get("proposal_id", "?")),
                parent=",".join(str(i) for i in p.parent_program_ids),
                accepted=False,
                score_before=float(sum(p.subsample_scores_before or [])),
                score_after=float(sum(p.subsample_scores_after or [])),
            )
            self.judged_ids.add(decision.proposal)
            self._pending.append(Pending(decision, candidate_key(p.candidate), id(p) in chosen_ids))

    def joined(self, candidate: dict[str, str], index: int) -> None:
        """`candidate` joined gepa's pool as `index`: its proposal was accepted."""
        key = candidate_key(candidate)
        for pending in self._pending:
            if pending.selected and pending.key == key:
                self._pending.remove(pending)
                self.accepted += 1
                self._sink.write(replace(pending.decision, accepted=True, candidate=str(index)))
                break

    def end_iteration(self) -> None:
        """The proposals still waiting were rejected."""
        for pending in self._pending:
            self._sink.write(pending.decision)
        self._pending.clear()


class NoProposals:
    """Every task of the iteration that ended without a proposal gepa judged (gepa 0.1.4
    logs these and goes on): skipped (on_evaluation_skipped), its reflective dataset
    raised, its reflection failed or gave no texts, or gepa caught an error
    (on_error); and a due merge that found no pair (`invoked_merge` without `merged`).
    Skips and failed datasets are written as gepa moves past them, the rest when the
    iteration ends."""

    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._written: set[int] = set()  # tasks of the iteration already accounted for
        self._error: str | None = None  # the exception gepa caught in this iteration

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
