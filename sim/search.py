"""The search itself, as gepa's rules (gepa_rules.py) ask it: which parents gepa draws,
how they score, which proposals beat them, and how a merge fares.

`SearchModel` is what those rules need of a search; two models implement it:

- `QualitySearch` (quality_search.py), the mechanistic one (pxn.quality):
  candidates of latent quality, scored example by example by gepa's rules.
- `RateSearch` (here), the phenomenological one (pxn.acceptance): proposals
  and merges pass at rates, parents are labels drawn from the newest
  `front_share` of the pool, perfect by chance; no rollout has a score.

Each operation is asked where gepa makes the choice, so each model draws in
the order gepa's run would: the rate model shares its stream with the
latencies, and moving a draw would change every replicate.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from pxn.acceptance import Acceptance
from pxn.sim.merge import SUBSAMPLE
from pxn.sim.minibatches import EpochSampler

if TYPE_CHECKING:
    from pxn.sim.gepa_rules import MergeTask, ProposalTask

Pair = tuple[str, int]  # (parent, minibatch chunk): what a parent is evaluated on

# Up to this many draws are made one by one: numpy's `size=` argument handling
# costs more than a few scalar draws, which give the same numbers and leave the
# same stream (tests/test_sim_fast_paths.py).
SCALAR_DRAWS = 3


def uniforms(rng: np.random.Generator, n: int) -> list[float]:
    """n uniform draws in [0, 1); up to SCALAR_DRAWS with numpy's scalar draw, one each."""
    return [rng.random() for _ in range(n)] if n <= SCALAR_DRAWS else rng.random(n).tolist()


class SearchModel(Protocol):
    """What gepa's rules ask of a search. A score list is None where the model has no
    scores (the rate model)."""

    rng: np.random.Generator
    sampler: EpochSampler  # the run's minibatches

    def seed_validation(self) -> list[float] | None:
        """The seed's validation scores."""

    def parents(self, count: int) -> list[int]:
        """`count` parents drawn from the front, each independently."""

    def evaluate_parents(self, iteration: int, pairs: list[Pair]) -> list[float] | None:
        """Each distinct (parent, chunk)'s minibatch scores, in order, flat."""

    def perfect(self, pairs: list[Pair]) -> set[Pair]:
        """The pairs whose parent is perfect on its minibatch (gepa skips their tasks)."""

    def evaluate_children(self, iteration: int, tasks: list[ProposalTask]) -> list[float] | None:
        """Each task's child proposed and scored on its minibatch, in order, flat."""

    def passing(self, tasks: list[ProposalTask]) -> list[ProposalTask]:
        """gepa's judge: the children that beat their parents, in order."""

    def most_improved_first(self, passing: list[ProposalTask]) -> list[ProposalTask]:
        """The passing children in gepa's ranking, for a selection that keeps the best."""

    def join(self, tasks: list[ProposalTask], joined: list[ProposalTask]) -> list[float] | None:
        """The `joined` of this iteration's `tasks` enter the pool; their validation scores."""

    def dominators(self) -> list[int]:
        """The candidates gepa may merge."""

    @property
    def merge_scores(self) -> list[float] | None:
        """Each candidate's mean validation score, as gepa's merge weighs them."""

    def merge_subsample(self, first: int, second: int) -> list[int]:
        """The validation examples a merge of `first` and `second` is judged on."""

    def evaluate_merge(self, merge: MergeTask) -> list[float] | None:
        """The merged program's scores on its subsample."""

    def judge_merge(self, merge: MergeTask) -> bool:
        """gepa's verdict on the merge."""

    def join_merge(self, merge: MergeTask) -> list[float] | None:
        """The accepted merge joins the pool; its validation scores."""


class RateSearch:
    """Proposals pass at a rate; parents are labels; perfect parents come by chance."""

    def __init__(
        self,
        acceptance: Acceptance,
        front_share: float,
        skip_chance: float,
        merge_acceptance: float,
        sampler: EpochSampler,
        rng: np.random.Generator,
    ):
        self.acceptance = acceptance
        self.front_share = front_share
        self.skip_chance = skip_chance
        self.merge_acceptance = merge_acceptance
        self.sampler = sampler  # unshuffled: a chunk's positions stand for its examples
        self.rng = rng
        self.candidates = 1  # the seed
        self.proposals = 0  # judged so far

    def front(self) -> range:
        """The newest front_share of the pool (all of it at 1)."""
        size = self.candidates
        if self.front_share < 1:
            size = max(1, math.ceil(self.front_share * self.candidates))
        return range(self.candidates - size, self.candidates)

    def parents(self, count: int) -> list[int]:
        """Uniformly from the front."""
        candidates = self.front()
        front, newest = len(candidates), candidates.start
        if count <= SCALAR_DRAWS:
            draws = [int(self.rng.integers(0, front)) for _ in range(count)]
        else:
            draws = self.rng.integers(0, front, size=count).tolist()
        return [newest + d for d in draws]

    # No rollout has a score: where the quality model scores rollouts, None.
    def seed_validation(self) -> None: ...
    def evaluate_parents(self, iteration: int, pairs: list[Pair]) -> None: ...
    def evaluate_children(self, iteration: int, tasks: list[ProposalTask]) -> None: ...
    def evaluate_merge(self, merge: MergeTask) -> None: ...

    def perfect(self, pairs: list[Pair]) -> set[Pair]:
        """Each pair is perfect by chance."""
        if self.skip_chance == 0:
            return set()
        draws = uniforms(self.rng, len(pairs))
        return {pair for pair, u in zip(pairs, draws, strict=True) if u < self.skip_chance}

    def dominators(self) -> list[int]:
        """The candidates gepa may merge: the front's, where parents are drawn."""
        return list(self.front())

    merge_scores = None  # no candidate has a score

    def passing(self, tasks: list[ProposalTask]) -> list[ProposalTask]:
        """Each proposal of an iteration passes at the iteration's (perhaps drawn) rate."""
        rate = self.acceptance.step_rate(self.rng, self.proposals)
        self.proposals += len(tasks)
        draws = uniforms(self.rng, len(tasks))
        return [task for task, u in zip(tasks, draws, strict=True) if u < rate]

    def most_improved_first(self, passing: list[ProposalTask]) -> list[ProposalTask]:
        return passing  # every passing child improved alike

    def join(self, tasks: list[ProposalTask], joined: list[ProposalTask]) -> None:
        self.candidates += len(joined)

    def merge_subsample(self, first: int, second: int) -> list[int]:
        return list(range(SUBSAMPLE))  # positions stand for the examples

    def judge_merge(self, merge: MergeTask) -> bool:
        return self.rng.random() < self.merge_acceptance

    def join_merge(self, merge: MergeTask) -> None:
        self.candidates += 1
