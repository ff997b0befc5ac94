"""Labels of the rollouts of an adapter call: which candidate, on which example.

An example is "train/i" or "val/i", found by identity in the user's own lists
(gepa passes their items through unchanged). A candidate is gepa's index for a
pool member, and the proposal id "i-j" for a child not yet in the pool (known
from its parent and the texts its proposal wrote).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
        self, items: Sequence[tuple[dict[str, str], Sequence[Any]]], phase: str, state: Any
    ) -> list[tuple[str, str]]:
        """One (candidate, example) per rollout of the call, pairs flattened; `state` is gepa's
        GEPAState (None before the first iteration)."""
        tags = []
        for candidate, batch in items:
            label = "0" if phase == "seed_val" else self._candidate(candidate, state)
            tags.extend((label, self._example(example, phase)) for example in batch)
        return tags

    def child_proposed(self, child: dict[str, str], proposal: str) -> None:
        """The child a proposal wrote, to label its rollouts before it joins the pool."""
        self._child_of.setdefault(candidate_key(child), proposal)

    def forget_children(self) -> None:
        """A new iteration: last iteration's children joined the pool or were dropped."""
        self._child_of.clear()

    def _candidate(self, candidate: dict[str, str], state: Any) -> str:
        key = candidate_key(candidate)
        if state is not None:
            for idx, cand in enumerate(state.program_candidates):
                if candidate_key(cand) == key:
                    return str(idx)
        return self._child_of.get(key, "?")

    def _example(self, example: Any, phase: str) -> str:
        val = phase in ("seed_val", "full_val")
        split, positions = ("val", self._val) if val else ("train", self._train)
        index = positions.get(id(example))
        return f"{split}/{'?' if index is None else index}"


def _positions(data: Any) -> dict[int, int]:
    if not isinstance(data, Sequence):
        return {}  # a gepa DataLoader: its items carry no position we can see
    return {id(item): i for i, item in enumerate(data)}
