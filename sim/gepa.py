"""gepa 0.1.4's choices in a batched iteration: parents, minibatches, skips, verdicts.

Read from gepa's source; what each stands for:

- Parents (ParetoCandidateSelector): gepa draws each of the P parents from
  its Pareto front, where tied and dominated programs collapse, so parents
  recur. Modelled by `front_share`: the front is the newest
  max(1, ceil(front_share * candidates)) candidates, each parent drawn
  uniformly from it (with front_share = 1, uniformly from the whole pool).
  Which candidates are on the front is a label here; that parents coincide
  is what changes the work.
- Minibatches (EpochShuffledBatchSampler): the trainset ids are padded to a
  multiple of b with repeated ids, so an epoch has ceil(trainset / b) chunks
  of b; task j of iteration i (gepa's state.i = i - 1) gets chunk
  (i - 1 + j) mod chunks, all from the same epoch's shuffle. Two tasks share a
  minibatch only when their chunks coincide, which needs k > chunks (the
  chunks wrap within the iteration). The shuffle itself is not modelled: a
  chunk's example names stand for its positions.
- The parent stage (ReflectiveMutationProposer) evaluates each distinct
  (parent, minibatch) pair once, and gepa counts only those rollouts. Tasks
  sharing a pair share its scores, so they are skipped together when the
  parent is perfect on that minibatch (skip_perfect, a chance per pair).
- Judging: a step's proposals are made at once, so they share the count of
  proposals made before the step (Acceptance.probability of it), and with a
  correlation the step's rate is one Beta draw (Acceptance.step_rate) at
  which each is accepted: the beta-binomial model.
- Selecting (the selection strategy, then GEPAEngine._run_reflective_batch):
  `all`, `best` or `topk:K` picks among the accepted; then identical children
  are dropped: each selected child after the first repeats an earlier one
  with chance `duplicate_children`, and a repeat gets no full validation and
  no place in the pool (gepa reports it rejected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pxn.scenario import Scenario
from pxn.shape import Shape


@dataclass(slots=True)
class Task:
    """One (parent, minibatch chunk) pair gepa proposes from; its child is `proposal`."""

    parent: str
    chunk: int
    proposal: str


# Up to this many parents are drawn one by one: integers(0, m, size=p) costs ~6 us of
# argument handling, a scalar draw ~1.5 us, and p scalar draws give the same numbers
# and leave the same stream as one draw of p (tests/test_sim_fast_paths.py).
SCALAR_DRAWS = 3


def uniforms(rng: np.random.Generator, n: int) -> list[float]:
    """n uniform draws in [0, 1); one is numpy's scalar draw (the same number, cheaper)."""
    return [rng.random()] if n == 1 else rng.random(n).tolist()


class EpochSampler:
    """Which chunk of the padded trainset each task's minibatch is."""

    def __init__(self, trainset_size: int, minibatch: int):
        self.trainset_size = trainset_size
        self.minibatch = minibatch
        self.chunks = math.ceil(trainset_size / minibatch)

    def chunk(self, iteration: int, task: int) -> int:
        return (iteration - 1 + task) % self.chunks

    def examples(self, chunk: int) -> list[str]:
        """The chunk's example names; padded positions repeat ids from the start."""
        first = chunk * self.minibatch
        return [f"train:{p % self.trainset_size}" for p in range(first, first + self.minibatch)]


class GepaChoices:
    """The choices gepa makes in one run, and the pool and proposal counts they depend on."""

    def __init__(self, scenario: Scenario, shape: Shape, rng: np.random.Generator):
        self.scenario = scenario
        self.shape = shape
        self.rng = rng
        self.sampler = EpochSampler(scenario.trainset_size, scenario.minibatch)
        # The scenario's parts each iteration reads, read once per run.
        self.front_share = scenario.front_share
        self.skip_chance = scenario.skip_perfect
        self.acceptance = scenario.acceptance.for_width(shape.k)
        self.limit = scenario.selection.limit
        self.repeats = scenario.duplicate_children
        self.candidates = 1  # the seed
        self.proposals = 0  # judged so far

    def sample_tasks(self, iteration: int) -> list[Task]:
        """P parents from the front, N minibatches each, as PxNSampling does."""
        front = self.candidates
        if self.front_share < 1:
            front = max(1, math.ceil(self.front_share * self.candidates))
        newest = self.candidates - front  # the front's first candidate id
        p, n = self.shape.p, self.shape.n
        if p <= SCALAR_DRAWS:  # numpy's scalar draws: the same numbers, cheaper for a few
            draws = [int(self.rng.integers(0, front)) for _ in range(p)]
        else:
            draws = self.rng.integers(0, front, size=p).tolist()
        parents = [str(newest + d) for d in draws]
        chunk = self.sampler.chunk
        return [
            Task(parents[j // n], chunk(iteration, j), f"{iteration}-{j}") for j in range(p * n)
        ]

    def skip_perfect_parents(self, tasks: list[Task], pairs: list[tuple[str, int]]) -> list[Task]:
        """gepa skips a task whose parent scored perfectly on its whole minibatch."""
        chance = self.skip_chance
        if chance == 0:
            return tasks
        draws = uniforms(self.rng, len(pairs))
        perfect = {pair for pair, u in zip(pairs, draws, strict=True) if u < chance}
        if not perfect:
            return tasks
        return [task for task in tasks if (task.parent, task.chunk) not in perfect]

    def judge(self, tasks: list[Task]) -> list[Task]:
        """The children that join the pool: accepted, selected, not repeats, in order."""
        rate = self.acceptance.step_rate(self.rng, self.proposals)
        self.proposals += len(tasks)
        draws = uniforms(self.rng, len(tasks))
        passing = [task for task, u in zip(tasks, draws, strict=True) if u < rate]
        selected = passing if self.limit is None else passing[: self.limit]
        repeats = self.repeats
        if repeats and len(selected) > 1:
            again = uniforms(self.rng, len(selected) - 1)
            selected = selected[:1] + [
                task for task, u in zip(selected[1:], again, strict=True) if u >= repeats
            ]
        return selected
