"""gepa 0.1.4's merge (use_merge): when it is tried, which candidates it merges, into what.

Read from gepa's source (core/engine.py, proposer/merge.py); what each stands for:

- The schedule (`MergeSchedule`). Each child an iteration's proposals add makes a
  merge due while fewer than `max_merges` merges were accepted, and marks
  the iteration as one that found a new program. At the top of the next
  iteration, when a merge is due and the last iteration found a new
  program, gepa tries one; either way the mark is cleared. Found and
  accepted, the merge uses up one due merge; found and rejected, it uses up
  none; either way it takes the iteration (no proposal). Not found,
  the iteration goes on to its proposals.
- The candidates (`Lineage.find`): two of gepa's dominators (the front's
  candidates no other covers) drawn at random, neither an ancestor of the
  other, with a common ancestor scoring no higher than either, that merges
  something: a component where the ancestor's text is one of theirs and
  theirs differ. gepa draws up to 10 pairs per search, and searches up to
  10 times; a triplet (pair and ancestor) is tried once, and a merge that
  would give a program described as before is not made again. The ancestor
  is drawn weighted by its mean validation score.
- The merged program (`Lineage.merged_texts`): each component from the
  parent whose text differs from the ancestor's; where both differ, the
  better parent's (a coin on a tie); where they agree, theirs.
- A component's text is known by the proposal that wrote it. gepa's
  reflection rewrites one component per proposal, the parent's next in
  round robin (each parent keeps its own pointer; a new candidate starts at
  the highest of its parents' pointers when it joins).

Under acceptance rates the front is the newest `front_share` of the pool and
no candidate has a score: every common ancestor passes gepa's score filter,
and is drawn uniformly, as is the better parent of a component both changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEARCHES = 10  # gepa's max_attempts: searches for a pair, and pairs drawn per search
SUBSAMPLE = 5  # validation examples a merged program is scored on (num_subsample_ids)


class MergeSchedule:
    """When gepa tries a merge (GEPAEngine.run and _run_reflective_batch)."""

    def __init__(self, max_merges: int):
        self.max_merges = max_merges
        self.due = 0  # merges_due
        self.accepted = 0  # total_merges_tested: gepa counts only accepted merges
        self.found_new = False  # last_iter_found_new_program

    def try_now(self) -> bool:
        """The top of an iteration: whether gepa tries a merge (it clears the mark either way)."""
        due = self.due > 0 and self.found_new
        self.found_new = False
        return due

    def merged(self, accepted: bool) -> None:
        """A merge was found and judged: accepted, it uses up a due merge."""
        if accepted:
            self.due -= 1
            self.accepted += 1

    def joined(self, children: int) -> None:
        """An iteration's proposals added `children` to the pool."""
        if children:
            self.found_new = True
            if self.accepted < self.max_merges:
                self.due += children


@dataclass(frozen=True)
class Triplet:
    """A merge gepa makes: two candidates, their common ancestor, the merged texts."""

    first: int
    second: int
    ancestor: int
    texts: tuple[int, ...]


class Lineage:
    """Every candidate's parents, ancestors and component texts, and gepa's merge search."""

    def __init__(self, components: int, rng: np.random.Generator):
        self.components = components
        self.rng = rng
        self.parents: list[tuple[int, ...]] = [()]  # the seed's
        self.ancestors: list[frozenset[int]] = [frozenset()]
        # A component's text by its name: the seed's are 0, each proposal's its number.
        self.texts: list[tuple[int, ...]] = [(0,) * components]
        self.pointer = [0]  # the component each candidate's next proposal rewrites
        self.tried: set[tuple[int, int, int]] = set()  # merges_performed[0]
        self.described: set[tuple[int, int, tuple[int, ...]]] = set()  # merges_performed[1]
        self.written = 0  # texts written by proposals so far: each one's name

    def rewrite(self, parent: int) -> tuple[int, ...]:
        """A proposal from `parent`: its texts with its next component rewritten (round robin)."""
        component = self.pointer[parent]
        self.pointer[parent] = (component + 1) % self.components
        self.written += 1
        texts = list(self.texts[parent])
        texts[component] = self.written  # a text no candidate holds yet
        return tuple(texts)

    def add(self, parents: tuple[int, ...], texts: tuple[int, ...]) -> None:
        """A candidate joins the pool."""
        self.parents.append(parents)
        self.ancestors.append(frozenset(parents).union(*(self.ancestors[p] for p in parents)))
        self.texts.append(texts)
        self.pointer.append(max(self.pointer[p] for p in parents))

    def find(self, dominators: list[int], scores: list[float] | None) -> Triplet | None:
        """The merge gepa makes of these dominators, or None; `scores`: each candidate's mean
        validation score (None under acceptance rates)."""
        if len(dominators) < 2 or len(self.parents) < 3:
            return None
        for _ in range(SEARCHES):
            pair = self._pair(dominators, scores)
            if pair is None:
                continue
            first, second, ancestor = pair
            texts, sources = self.merged_texts(first, second, ancestor, scores)
            if (first, second, sources) in self.described:
                continue
            self.described.add((first, second, sources))
            self.tried.add((first, second, ancestor))
            return Triplet(first, second, ancestor, texts)
        return None

    def _pair(
        self, dominators: list[int], scores: list[float] | None
    ) -> tuple[int, int, int] | None:
        for _ in range(SEARCHES):
            first, second = sorted(self.rng.choice(dominators, size=2, replace=False).tolist())
            common = self.common_ancestors(first, second, scores)
            if common:
                return first, second, self._ancestor(common, scores)
        return None

    def common_ancestors(self, first: int, second: int, scores: list[float] | None) -> list[int]:
        """The ancestors gepa may merge `first` and `second` through (none when one is the
        other's ancestor), lowest index first."""
        if first in self.ancestors[second] or second in self.ancestors[first]:
            return []
        return sorted(
            a
            for a in self.ancestors[first] & self.ancestors[second]
            if (first, second, a) not in self.tried
            and (scores is None or scores[a] <= min(scores[first], scores[second]))
            and self.merges_something(a, first, second)
        )

    def _ancestor(self, common: list[int], scores: list[float] | None) -> int:
        weights = None if scores is None else np.array([scores[a] for a in common])
        if weights is None or weights.sum() <= 0:  # all 0: gepa 0.1.4 raises, here uniform
            return common[int(self.rng.integers(len(common)))]
        return common[int(self.rng.choice(len(common), p=weights / weights.sum()))]

    def merges_something(self, ancestor: int, first: int, second: int) -> bool:
        """gepa's does_triplet_have_desirable_predictors."""
        return any(
            a in (x, y) and x != y
            for a, x, y in zip(
                self.texts[ancestor], self.texts[first], self.texts[second], strict=True
            )
        )

    def merged_texts(
        self, first: int, second: int, ancestor: int, scores: list[float] | None
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The merged program's texts, and which parent gave each (gepa's description)."""
        texts, sources = [], []
        for a, x, y in zip(
            self.texts[ancestor], self.texts[first], self.texts[second], strict=True
        ):
            if a in (x, y) and x != y:
                source = second if a == x else first
            elif a not in (x, y):
                source = self._better(first, second, scores)
            else:
                source = first
            texts.append(self.texts[source][len(texts)])
            sources.append(source)
        return tuple(texts), tuple(sources)

    def _better(self, first: int, second: int, scores: list[float] | None) -> int:
        if scores is not None and scores[first] != scores[second]:
            return first if scores[first] > scores[second] else second
        return (first, second)[int(self.rng.integers(2))]


def subsample(first: np.ndarray, second: np.ndarray, rng: np.random.Generator) -> list[int]:
    """The SUBSAMPLE validation examples gepa scores a merge on, from its parents' validation
    scores (select_eval_subsample_for_merged_program): up to ceil(SUBSAMPLE / 3) where the
    first did better, as many where the second did, as many where they tied, then any
    others; drawn with replacement only when the valset holds fewer than SUBSAMPLE."""
    examples = range(len(first))
    buckets = [
        [e for e in examples if first[e] > second[e]],
        [e for e in examples if second[e] > first[e]],
        [e for e in examples if first[e] == second[e]],
    ]
    each = max(1, -(-SUBSAMPLE // 3))
    chosen: list[int] = []
    for bucket in buckets:
        take = min(len(bucket), each, SUBSAMPLE - len(chosen))
        if take > 0:
            chosen += rng.choice(bucket, size=take, replace=False).tolist()
    rest = [e for e in examples if e not in chosen]
    missing = SUBSAMPLE - len(chosen)
    if missing > 0:
        if len(rest) >= missing:
            chosen += rng.choice(rest, size=missing, replace=False).tolist()
        else:
            chosen += rng.choice(len(first), size=missing).tolist()
    return chosen
