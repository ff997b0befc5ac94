"""gepa 0.1.4's choices in a batched iteration: parents, minibatches, skips, verdicts.

Read from gepa's source; what each stands for:

- Parents (ParetoCandidateSelector): each of the P parents drawn from the
  Pareto front, by the search model (search.py): gepa's own front of real
  candidates under the quality model, or labels from the newest
  `front_share` of the pool under acceptance rates.
- Minibatches (EpochShuffledBatchSampler): the trainset ids are padded to a
  multiple of b with repeated ids, so an epoch has ceil(trainset / b) chunks
  of b; task j of iteration i (gepa's state.i = i - 1) gets chunk
  (i - 1 + j) mod chunks, all from the same epoch's shuffle. Two tasks share a
  minibatch only when their chunks coincide, which needs k > chunks (the
  chunks wrap within the iteration). Under the quality model each epoch has
  its own shuffle (examples differ in difficulty); under acceptance rates a
  chunk's positions stand for its examples.
- The parent stage (ReflectiveMutationProposer) evaluates each distinct
  (parent, minibatch) pair once, and gepa counts only those rollouts. Tasks
  sharing a pair share its scores, so they are skipped together when the
  parent is perfect on that minibatch.
- Judging (StrictImprovementAcceptance): a child passes when its minibatch
  sum beats its parent's on the same examples (under acceptance rates: at
  the iteration's rate).
- Selecting (the selection strategy, then GEPAEngine._run_reflective_batch):
  `all` keeps every passing child, `best` the one that improved most, `topk:K`
  the K that improved most (ties in order); then identical children are
  dropped: each selected child after the first repeats an earlier one with
  chance `duplicate_children`, and a repeat gets no full validation and no
  place in the pool (gepa reports it rejected).
- Merging (use_merge, in a program of two components or more): when a merge
  is tried and which candidates it merges are merge.py's; how it fares, the
  search model's. Each proposal rewrites its parent's next component, and
  each new candidate joins the lineage the merge searches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.merge import SUBSAMPLE, Lineage, MergeSchedule, Triplet
from pxn.sim.reflections import Passes, lose_before_reflection, reflection_passes
from pxn.sim.search import Children, MergedChild, QualitySearch, RateSearch, uniforms


@dataclass(slots=True)
class ProposalTask:
    """One (parent, minibatch chunk) pair gepa proposes from; its child is `proposal`.

    `before` and `after` are the parent's and the child's minibatch sums, under
    the quality model.
    """

    parent: str
    chunk: int
    proposal: str
    before: float | None = None
    after: float | None = None
    texts: tuple[int, ...] = ()  # the child's component texts, when gepa may merge


@dataclass(slots=True)
class MergeTask:
    """A merge gepa tries: its triplet, the validation examples it is scored on and, under
    the quality model, the merged program and the subsample sums (its parents' best, its own)."""

    triplet: Triplet
    examples: list[int]
    child: MergedChild | None = None
    before: float | None = None
    after: float | None = None


class EpochSampler:
    """Which chunk of the padded trainset each task's minibatch is, and its examples."""

    def __init__(self, trainset_size: int, minibatch: int, rng: np.random.Generator | None = None):
        """`rng`: each epoch's shuffle is drawn from it; None: positions stand for examples."""
        self.trainset_size = trainset_size
        self.minibatch = minibatch
        self.chunks = math.ceil(trainset_size / minibatch)
        self.rng = rng
        self.tables: dict[int, list[list[int]]] = {}  # epoch -> each chunk's example ids

    def chunk(self, iteration: int, task: int) -> int:
        return (iteration - 1 + task) % self.chunks

    def epoch(self, iteration: int) -> int:
        return (iteration - 1) * self.minibatch // (self.chunks * self.minibatch)

    def ids(self, iteration: int, chunks: list[int]) -> list[list[int]]:
        """The example ids of each chunk in this iteration's epoch, a row each."""
        epoch = 0 if self.rng is None else self.epoch(iteration)
        table = self.tables.get(epoch)
        if table is None:
            b = self.minibatch
            padded = self.padded_order()
            table = [padded[c * b : c * b + b] for c in range(self.chunks)]
            self.tables[epoch] = table
        return [table[chunk] for chunk in chunks]

    def padded_order(self) -> list[int]:
        """An epoch's ids, padded to whole chunks. gepa pads with the least frequent ids,
        ties to the latest in its shuffle (Counter.most_common reversed): the shuffle's last
        ids, last first, so the last minibatch may hold one twice. Without a shuffle the
        positions repeat from the start (ids stand for positions there)."""
        size, pad = self.trainset_size, self.chunks * self.minibatch - self.trainset_size
        if self.rng is None:
            return [p % size for p in range(size + pad)]
        order = self.rng.permutation(size).tolist()
        return order + [order[-1 - j] for j in range(pad)]

    def examples(self, iteration: int, chunk: int) -> list[str]:
        """The chunk's example names, as the trace gives them."""
        return [f"train:{i}" for i in self.ids(iteration, [chunk])[0]]


class GepaChoices:
    """The choices gepa makes in one run, and the pool and proposal counts they depend on."""

    def __init__(
        self,
        scenario: Scenario,
        shape: Shape,
        rng: np.random.Generator,
        search_rng: np.random.Generator | None = None,
        failures_rng: np.random.Generator | None = None,
    ):
        """`rng` draws what the acceptance rates decide; `search_rng` the quality model's
        examples, qualities and scores, `failures_rng` which proposals are lost, when they
        can be (each its own stream, so the latencies' stays apart)."""
        self.scenario = scenario
        self.shape = shape
        self.rng = rng
        self.failures_rng = failures_rng
        self.limit = scenario.selection.limit
        self.repeats = scenario.duplicate_children
        quality = scenario.quality
        if quality is None:
            self.sampler = EpochSampler(scenario.trainset_size, scenario.minibatch)
            self.search: QualitySearch | RateSearch = RateSearch(
                scenario.acceptance.for_width(shape.k),
                scenario.front_share,
                scenario.skip_perfect,
                rng,
            )
        else:
            if search_rng is None:
                raise ValueError("the quality model needs its own random stream")
            self.sampler = EpochSampler(scenario.trainset_size, scenario.minibatch, search_rng)
            self.search = QualitySearch(
                quality, scenario.trainset_size, scenario.valset_size, search_rng
            )
        self.candidates = 1  # the seed
        self.proposals = 0  # judged so far
        self.children: Children | None = None  # this iteration's, under the quality model
        self.sums: dict[tuple[str, int], float] = {}  # this iteration's parent minibatch sums
        # gepa's merge, where it can merge something (merge.py).
        self.schedule: MergeSchedule | None = None
        self.lineage: Lineage | None = None
        if scenario.merges:
            self.schedule = MergeSchedule(scenario.max_merges)
            self.lineage = Lineage(scenario.components, self.search.rng)

    @property
    def scored(self) -> bool:
        """Whether rollouts have scores (the quality model)."""
        return isinstance(self.search, QualitySearch)

    def seed_validation(self) -> list[float] | None:
        """The seed's validation scores (None without the quality model)."""
        return self.search.seed_validation().tolist() if self.scored else None

    def sample_tasks(self, iteration: int) -> list[ProposalTask]:
        """P parents from the front, N minibatches each, as PxNSampling does."""
        p, n = self.shape.p, self.shape.n
        parents = [str(c) for c in self.search.parents(p)]
        chunk = self.sampler.chunk
        return [
            ProposalTask(parents[j // n], chunk(iteration, j), f"{iteration}-{j}")
            for j in range(p * n)
        ]

    def evaluate_parents(self, iteration: int, pairs: list[tuple[str, int]]) -> list[float] | None:
        """Each distinct (parent, chunk)'s scores, a minibatch each, in order (None without
        the quality model)."""
        if not self.scored:
            return None
        examples = self.sampler.ids(iteration, [chunk for _, chunk in pairs])
        scores = self.search.evaluate([int(parent) for parent, _ in pairs], examples)
        self.sums = {pair: sum(row) for pair, row in zip(pairs, scores, strict=True)}
        self.perfect = {pair for pair, row in zip(pairs, scores, strict=True) if min(row) >= 1}
        return [score for row in scores for score in row]

    def skip_perfect_parents(
        self, tasks: list[ProposalTask], pairs: list[tuple[str, int]]
    ) -> list[ProposalTask]:
        """gepa skips a task whose parent scored perfectly on its whole minibatch."""
        if self.scored:
            perfect = self.perfect
        else:
            flags = self.search.perfect(len(pairs))
            perfect = {pair for pair, flag in zip(pairs, flags, strict=True) if flag}
        if not perfect:
            return tasks
        return [task for task in tasks if (task.parent, task.chunk) not in perfect]

    def lose_before_reflection(
        self, tasks: list[ProposalTask]
    ) -> tuple[list[ProposalTask], list[ProposalTask]]:
        """(kept, lost): the tasks whose reflective dataset could (not) be built."""
        chance = self.scenario.failures.dataset
        if not chance:
            return tasks, []
        return lose_before_reflection(tasks, chance, self.failures_rng)

    def reflect(self, tasks: list[ProposalTask]) -> Passes:
        """gepa's reflection passes over these tasks, and which calls failed."""
        failures = self.scenario.failures
        if not failures.reflection:
            return Passes(tasks, [False] * len(tasks))
        one_at_a_time = self.scenario.reflection_concurrency == 1
        return reflection_passes(tasks, failures, one_at_a_time, self.failures_rng)

    def evaluate_children(self, iteration: int, tasks: list[ProposalTask]) -> list[float] | None:
        """Each task's child, proposed and scored on its minibatch, in order (None without
        the quality model)."""
        if not self.scored:
            return None
        examples = self.sampler.ids(iteration, [task.chunk for task in tasks])
        self.children, scores = self.search.propose([int(task.parent) for task in tasks], examples)
        for task, row in zip(tasks, scores, strict=True):
            task.before, task.after = self.sums[task.parent, task.chunk], sum(row)
        return [score for row in scores for score in row]

    def judge(self, tasks: list[ProposalTask]) -> list[ProposalTask]:
        """The children that join the pool: passing, selected, not repeats, in order."""
        if self.lineage is not None:  # each proposal rewrote its parent's next component
            for task in tasks:
                task.texts = self.lineage.rewrite(int(task.parent))
        self.proposals += len(tasks)
        if self.scored:
            passing = [task for task in tasks if task.after > task.before]
        else:
            flags = self.search.passing(len(tasks))
            passing = [task for task, flag in zip(tasks, flags, strict=True) if flag]
        selected = self.select(passing)
        repeats = self.repeats
        if repeats and len(selected) > 1:
            again = uniforms(self.rng, len(selected) - 1)
            selected = selected[:1] + [
                task for task, u in zip(selected[1:], again, strict=True) if u >= repeats
            ]
        return selected

    def select(self, passing: list[ProposalTask]) -> list[ProposalTask]:
        """The selection strategy: all, or the `limit` that improved most (ties in order)."""
        if self.limit is None or len(passing) <= self.limit:
            return passing
        if not self.scored:  # every passing child improved alike
            return passing[: self.limit]
        # Most improved first, ties in order (a stable sort), as gepa ranks them.
        return sorted(passing, key=lambda task: task.before - task.after)[: self.limit]

    def join(self, tasks: list[ProposalTask], joined: list[ProposalTask]) -> list[float] | None:
        """The joined children enter the pool; their validation scores, one candidate after
        another (None without the quality model)."""
        self.candidates += len(joined)
        if not self.scored:
            self.search.candidates = self.candidates
            return None
        index = {id(task): i for i, task in enumerate(tasks)}
        scores = self.search.add(self.children, [index[id(task)] for task in joined])
        return np.concatenate(scores).tolist()

    def joined(self, children: list[ProposalTask]) -> None:
        """The iteration's children joined the pool: the merge's lineage and schedule
        learn of them."""
        if self.lineage is not None:
            for task in children:
                self.lineage.add((int(task.parent),), task.texts)
            self.schedule.joined(len(children))

    # -- gepa's merge ---------------------------------------------------------------------

    def merge_now(self) -> MergeTask | None:
        """The merge gepa tries at the top of this iteration, or None (none due, or no pair
        found: the iteration goes on to its proposals)."""
        if self.schedule is None or not self.schedule.try_now():
            return None
        search = self.search
        triplet = self.lineage.find(search.dominators(), search.merge_scores)
        if triplet is None:
            return None
        if not self.scored:  # positions stand for the examples
            return MergeTask(triplet, list(range(SUBSAMPLE)))
        return MergeTask(triplet, search.merge_subsample(triplet.first, triplet.second))

    def evaluate_merge(self, merge: MergeTask) -> list[float] | None:
        """The merged program's scores on its subsample (None without the quality model)."""
        if not self.scored:
            return None
        search, first, second = self.search, merge.triplet.first, merge.triplet.second
        merge.child = search.merge(first, second)
        scores = search.score_merged(merge.child, merge.examples)
        known = (search.validated[p][merge.examples] for p in (first, second))
        merge.before = max(float(row.sum()) for row in known)
        merge.after = sum(scores)
        return scores

    def judge_merge(self, merge: MergeTask) -> bool:
        """gepa's verdict: the merged sum reaches its better parent's (under acceptance rates:
        at the scenario's merge_acceptance)."""
        if self.scored:
            accepted = merge.after >= merge.before
        else:
            accepted = self.rng.random() < self.scenario.merge_acceptance
        self.schedule.merged(accepted)
        return accepted

    def join_merge(self, merge: MergeTask) -> list[float] | None:
        """The accepted merge joins the pool; its validation scores (None without the quality
        model)."""
        triplet = merge.triplet
        self.lineage.add((triplet.first, triplet.second), triplet.texts)
        self.candidates += 1
        if not self.scored:
            self.search.candidates = self.candidates
            return None
        return self.search.add_merged(merge.child).tolist()
