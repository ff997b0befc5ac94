"""Labels of the rollouts of an adapter call: which candidate, on which example.

An example is "train/i" or "val/i", found by identity in the user's own lists
(gepa passes their items through unchanged). A candidate is gepa's index for a
pool member, and the proposal id "i-j" for a child not yet in the pool (known
from its parent and the texts its proposal wrote), even when its texts repeat
a pool member's; a merged program is "i-merge" on its subsample (gepa names no
texts before it is judged) and in its full validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pxn.runner.recording.merges import merge_proposal

CandidateKey = tuple[tuple[str, str], ...]


def candidate_key(candidate: dict[str, str]) -> CandidateKey:
    return tuple(sorted(candidate.items()))


class RolloutLabels:
    """The (candidate, example) labels of an adapter call's rollouts, in gepa's order."""

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
