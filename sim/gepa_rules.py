"""gepa 0.1.4's rules in a batched iteration: parents, minibatches, skips, reflections, verdicts.

Read from gepa's source; what each stands for (the search model, search.py,
answers what the rules ask of the candidates):

- Parents (ParetoCandidateSelector): each of the P parents drawn from the
  Pareto front, by the search model.
- Minibatches (EpochShuffledBatchSampler): task j of iteration i gets the
  chunk minibatches.py names, all from the same epoch's shuffle.
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
- Reflections (ReflectiveMutationProposer.propose), when proposals can be
  lost (pxn.failures): a task whose reflective dataset cannot be built is
  dropped (`dataset`, drawn per distinct (parent, minibatch) pair: tasks
  sharing one share its fate). The rest reflect in one pass
  (`_propose_texts_batch_safe`): every call at once, C at a time, or one
  after another when C = 1, a pass that then stops at its first failure.
  When any call of it fails gepa throws the pass away and asks again for
  every task, one at a time: a task whose call failed fails again with
  chance `retry`, any other with chance `reflection`. A task whose last
  call failed makes no proposal.
- Merging (use_merge, in a program of two components or more): when a merge
  is tried and which candidates it merges are merge.py's; how it fares, the
  search model's. Each proposal rewrites its parent's next component, and
  each new candidate joins the lineage the merge searches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pxn.failures import Failures
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.merge import Lineage, MergeSchedule, Triplet
from pxn.sim.minibatches import EpochSampler
from pxn.sim.quality_search import MergedChild, QualitySearch
from pxn.sim.search import Pair, RateSearch, SearchModel, uniforms

FAILED = "reflection failed (simulated)"  # a failed call's error in a simulated trace


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


@dataclass
class Passes:
    """An iteration's reflection calls, pass by pass, and which of them failed."""

    first: list[ProposalTask]
    first_failed: list[bool]
    retried: list[ProposalTask] = field(default_factory=list)  # every task, one at a time
    retry_failed: list[bool] = field(default_factory=list)

    @property
    def proposing(self) -> list[ProposalTask]:
        """The tasks whose last call gave texts, in order."""
        if not self.retried:
            return self.first
        return [t for t, failed in zip(self.retried, self.retry_failed, strict=True) if not failed]

    @property
    def lost(self) -> list[ProposalTask]:
        if not self.retried:
            return []
        return [t for t, failed in zip(self.retried, self.retry_failed, strict=True) if failed]


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
        self.search = search_model(scenario, shape, rng, search_rng)
        self.sampler = self.search.sampler
        self.candidates = 1  # the seed
        self.proposals = 0  # judged so far
        # gepa's merge, where it can merge something (merge.py).
        self.schedule: MergeSchedule | None = None
        self.lineage: Lineage | None = None
        if scenario.merges:
            self.schedule = MergeSchedule(scenario.max_merges)
            self.lineage = Lineage(scenario.components, self.search.rng)

    def sample_tasks(self, iteration: int) -> list[ProposalTask]:
        """P parents from the front, N minibatches each, as PxNSampling does."""
        p, n = self.shape.p, self.shape.n
        parents = [str(c) for c in self.search.parents(p)]
        chunk = self.sampler.chunk
        return [
            ProposalTask(parents[j // n], chunk(iteration, j), f"{iteration}-{j}")
            for j in range(p * n)
        ]

    def skip_perfect_parents(
        self, tasks: list[ProposalTask], pairs: list[Pair]
    ) -> list[ProposalTask]:
        """gepa skips a task whose parent scored perfectly on its whole minibatch."""
        perfect = self.search.perfect(pairs)
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
        # Drawn per distinct (parent, minibatch) pair.
        pairs = list(dict.fromkeys((task.parent, task.chunk) for task in tasks))
        draws = self.failures_rng.random(len(pairs))
        failed = {pair for pair, u in zip(pairs, draws, strict=True) if u < chance}
        kept = [task for task in tasks if (task.parent, task.chunk) not in failed]
        return kept, [task for task in tasks if (task.parent, task.chunk) in failed]

    def reflect(self, tasks: list[ProposalTask]) -> Passes:
        """gepa's reflection passes over these tasks, and which calls failed."""
        failures = self.scenario.failures
        if not failures.reflection:
            return Passes(tasks, [False] * len(tasks))
        one_at_a_time = self.scenario.reflection_concurrency == 1
        return reflection_passes(tasks, failures, one_at_a_time, self.failures_rng)

    def judge(self, tasks: list[ProposalTask]) -> list[ProposalTask]:
        """The children that join the pool: passing, selected, not repeats, in order."""
        if self.lineage is not None:  # each proposal rewrote its parent's next component
            for task in tasks:
                task.texts = self.lineage.rewrite(int(task.parent))
        self.proposals += len(tasks)
        selected = self.search.passing(tasks)
        if self.limit is not None and len(selected) > self.limit:  # keep the most improved
            selected = self.search.most_improved_first(selected)[: self.limit]
        repeats = self.repeats
        if repeats and len(selected) > 1:
            again = uniforms(self.rng, len(selected) - 1)
            selected = selected[:1] + [
                task for task, u in zip(selected[1:], again, strict=True) if u >= repeats
            ]
        return selected

    def join(self, tasks: list[ProposalTask], joined: list[ProposalTask]) -> list[float] | None:
        """The joined children enter the pool (the merge's lineage and schedule learn of
        them after their validation: `note_lineage`); their validation scores."""
        self.candidates += len(joined)
        return self.search.join(tasks, joined)

    def note_lineage(self, children: list[ProposalTask]) -> None:
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
        return MergeTask(triplet, search.merge_subsample(triplet.first, triplet.second))

    def judge_merge(self, merge: MergeTask) -> bool:
        """gepa's verdict: the merged sum reaches its better parent's (under acceptance rates:
        at the scenario's merge_acceptance)."""
        accepted = self.search.judge_merge(merge)
        self.schedule.merged(accepted)
        return accepted

    def join_merge(self, merge: MergeTask) -> list[float] | None:
        """The accepted merge joins the pool; its validation scores."""
        triplet = merge.triplet
        self.lineage.add((triplet.first, triplet.second), triplet.texts)
        self.candidates += 1
        return self.search.join_merge(merge)


def reflection_passes(
    tasks: list[ProposalTask], failures: Failures, one_at_a_time: bool, rng: np.random.Generator
) -> Passes:
    """gepa's passes over these tasks' reflections."""
    failed = (rng.random(len(tasks)) < failures.reflection).tolist()
    if not any(failed):
        return Passes(tasks, failed)
    # One at a time, the pass stops at its first failure: the tasks after it never ran.
    reached = failed.index(True) + 1 if one_at_a_time else len(tasks)
    chances = [
        failures.retry_failure if i < reached and failed[i] else failures.reflection
        for i in range(len(tasks))
    ]
    again = (rng.random(len(tasks)) < np.asarray(chances)).tolist()
    return Passes(tasks[:reached], failed[:reached], list(tasks), again)


def search_model(
    scenario: Scenario,
    shape: Shape,
    rng: np.random.Generator,
    search_rng: np.random.Generator | None,
) -> SearchModel:
    """The scenario's search model: the quality model where it has one, on its own stream."""
    quality = scenario.quality
    if quality is None:
        return RateSearch(
            scenario.acceptance.for_width(shape.k),
            scenario.front_share,
            scenario.skip_perfect,
            scenario.merge_acceptance,
            EpochSampler(scenario.trainset_size, scenario.minibatch),
            rng,
        )
    if search_rng is None:
        raise ValueError("the quality model needs its own random stream")
    return QualitySearch(
        quality, scenario.trainset_size, scenario.valset_size, search_rng, scenario.minibatch
    )
