"""The mechanistic search model (pxn.quality), a SearchModel (search.py): every candidate
has a latent quality and its own residual on every train and validation example; parents,
minibatch scores, gepa's judge and its Pareto front follow from them by gepa 0.1.4's own
rules, so acceptance, its decay, sibling correlation, the skipping of perfect parents and
the recurrence of parents come out of the model. A merged program is made of its parents'
latents (pxn.quality) and judged by gepa's own rule, its subsample sum against its
parents' known validation scores on the same examples.

gepa's Pareto front (gepa_utils.select_program_candidate_from_pareto_front):
per validation example, the candidates with its best score; candidates
dominated there are removed, lowest mean validation score first, and a
parent is drawn with weight the number of examples whose front it is on. A
candidate is dominated when every example whose front it is on has another
remaining candidate on it too; one that is not stays so as others go, so a
single pass from the lowest mean up, against the candidates kept so far and
those not yet passed, removes what gepa's repeated scan removes. Fronts are
bit masks over the validation examples. Ties in mean go lowest index first.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import TYPE_CHECKING

import numpy as np

from pxn.quality import Quality
from pxn.run_summary import Repeats, SearchFigures, example_spread
from pxn.sim.merge import subsample
from pxn.sim.minibatches import EpochSampler
from pxn.sim.search import Pair, uniforms

if TYPE_CHECKING:
    from pxn.sim.gepa_rules import MergeTask, ProposalTask


def bit_mask(flags: np.ndarray) -> int:
    """The examples where `flags` holds, as the bits of an int."""
    return int.from_bytes(np.packbits(flags).tobytes(), "big")


class ParetoFront:
    """gepa's per-example validation front, and the parent draw it gives."""

    def __init__(self) -> None:
        self.best: np.ndarray | None = None  # the best score on each example
        self.masks: list[int] = []  # per candidate: the examples whose front it is on
        self.means: list[float] = []  # per candidate: its mean validation score
        self.ranked: list[tuple[float, int]] = []  # (mean, candidate), lowest first
        self.ids: list[int] = []  # the parents to draw from, and their cumulative weights
        self.cumulative: list[int] = []

    def add(self, scores: np.ndarray) -> None:
        """A new candidate (the next index) validated with these scores."""
        if self.best is None:
            self.best = scores.copy()
            self.masks.append(bit_mask(np.ones(len(scores), dtype=bool)))
        else:
            higher = bit_mask(scores > self.best)
            if higher:  # those examples' fronts are the new candidate's alone
                kept = ~higher
                self.masks = [mask & kept for mask in self.masks]
                self.best = np.maximum(self.best, scores)
            self.masks.append(bit_mask(scores == self.best))
        self.means.append(float(scores.sum()) / len(scores))  # numpy's mean, to the bit
        bisect.insort(self.ranked, (self.means[-1], len(self.means) - 1))
        self.ids = []  # the draw is rebuilt when next asked for

    def weights(self) -> tuple[list[int], list[int]]:
        """The candidates gepa draws parents from and their cumulative weights."""
        if not self.ids:
            masks = self.masks
            order = [c for _, c in self.ranked if masks[c]]
            after = [0] * (len(order) + 1)  # after[i]: the fronts of order[i:]
            for i in range(len(order) - 1, -1, -1):
                after[i] = after[i + 1] | self.masks[order[i]]
            kept_union = 0
            kept = []
            for i, c in enumerate(order):
                mask = self.masks[c]
                if mask & ~(kept_union | after[i + 1]):  # the only one left on some front
                    kept.append(c)
                    kept_union |= mask
            self.ids = kept
            self.cumulative = list(accumulate(self.masks[c].bit_count() for c in kept))
        return self.ids, self.cumulative

    def draw(self, rng: np.random.Generator, count: int) -> list[int]:
        """`count` parents, each independently, as gepa's candidate selector draws them."""
        ids, cumulative = self.weights()
        total = cumulative[-1]
        return [ids[bisect.bisect_right(cumulative, u * total)] for u in uniforms(rng, count)]

    @property
    def best_candidate(self) -> int:
        """gepa's result: the candidate of the highest mean validation score (lowest index)."""
        return self.means.index(max(self.means))


NORMALS_BLOCK = 1024  # standard normals a numpy call draws for the one-at-a-time draws


def normals(rng: np.random.Generator) -> Callable[[], float]:
    """One standard normal draw per call, from blocks of one numpy call each (a chained
    iterator: numpy's per-call cost, and a Python method's, would be most of a draw's)."""
    blocks = iter(lambda: rng.standard_normal(NORMALS_BLOCK).tolist(), None)
    return chain.from_iterable(blocks).__next__


@dataclass(slots=True)
class Children:
    """The proposals of one iteration before they are judged: their qualities, and their
    residuals on the examples of their minibatches."""

    parents: list[int]  # pool index of each one's parent
    quality: list[float]  # theta
    residuals: list[dict[int, float]]  # example -> residual, on each one's minibatch


@dataclass(slots=True)
class MergedChild:
    """A merged program before it is judged: its quality and its residuals everywhere."""

    quality: float
    train_residuals: np.ndarray
    val_residuals: np.ndarray


class QualitySearch:
    """One run's candidates: their qualities and residuals, the examples, gepa's front.

    A minibatch is a few examples, so its scores are worked out in Python floats
    (numpy's cost per call is more than their arithmetic); the validation set
    and a new candidate's residuals on the whole trainset in numpy.
    """

    def __init__(
        self,
        quality: Quality,
        trainset_size: int,
        valset_size: int,
        rng: np.random.Generator,
        minibatch: int = 3,
    ):
        self.model = quality
        self.rng = rng
        self.sampler = EpochSampler(trainset_size, minibatch, rng)  # an epoch's own shuffle
        self.normal = normals(rng)
        self.noise = quality.eval_noise
        self.score = quality.scorer()
        self.binary = quality.metric == "binary"  # scored inline, the most common metric
        self.train_difficulty = rng.normal(0.0, quality.difficulty_sd, trainset_size).tolist()
        # The seed's measured validation scores, where known, say what its examples are like.
        measured = quality.seed_examples(rng) if quality.seed_validation else None
        self.val_difficulty = (
            measured[0] if measured else rng.normal(0.0, quality.difficulty_sd, valset_size)
        )
        self.quality = [quality.seed_quality]  # theta per candidate
        residuals = rng.standard_normal(trainset_size)
        # Per candidate, numpy and the same as a list for the Python path; None until it
        # is first needed (as a parent, or an ancestor of one), most are never: then drawn
        # from its parent's and the residuals its minibatch drew (`pending`).
        self.train_residuals: list[np.ndarray | None] = [residuals]
        self.train_residual_list: list[list[float] | None] = [residuals.tolist()]
        self.pending: dict[int, tuple[int, dict[int, float]]] = {}
        self.val_residuals = [measured[1] if measured else rng.standard_normal(valset_size)]
        self.front = ParetoFront()
        self.parent = [-1]  # per candidate
        self.validated: list[np.ndarray] = []  # each candidate's validation scores
        self.repeats = Repeats()
        # This iteration's: the parents' minibatch sums, the pairs they were perfect on,
        # and the children proposed.
        self.sums: dict[Pair, float] = {}
        self.perfect_pairs: set[Pair] = set()
        self.children: Children | None = None

    def seed_validation(self) -> list[float]:
        """The seed's validation scores; the front starts from them."""
        scores = self.val_scores(self.quality[0], self.val_residuals[0])
        self.front.add(scores)
        self.validated.append(scores)
        return scores.tolist()

    def train_residual(self, candidate: int) -> np.ndarray:
        """The candidate's residual on every train example, drawn when first needed."""
        residuals = self.train_residuals[candidate]
        if residuals is None:
            parent, drawn = self.pending.pop(candidate)
            model = self.model
            residuals = model.inherit * self.train_residual(
                parent
            ) + model.fresh_share * self.rng.standard_normal(len(self.train_difficulty))
            for e, value in drawn.items():  # those its minibatch drew, as judged
                residuals[e] = value
            self.train_residuals[candidate] = residuals
            self.train_residual_list[candidate] = residuals.tolist()
        return residuals

    def train_residual_values(self, candidate: int) -> list[float]:
        """train_residual as a list, for the Python path."""
        if self.train_residual_list[candidate] is None:
            self.train_residual(candidate)
        return self.train_residual_list[candidate]

    def val_scores(
        self, quality: float, residuals: np.ndarray, examples: list[int] | None = None
    ) -> np.ndarray:
        """A candidate's scores on these validation examples (None: all of them), one
        evaluation each, from its quality and its validation residuals."""
        difficulty = self.val_difficulty
        if examples is not None:
            difficulty, residuals = difficulty[examples], residuals[examples]
        latent = quality - difficulty + residuals
        if self.noise:
            latent += self.noise * self.rng.standard_normal(len(latent))
        return self.model.score(latent)

    def parents(self, count: int) -> list[int]:
        return self.front.draw(self.rng, count)

    # -- what gepa's rules ask of a search (SearchModel) ---------------------------------

    def evaluate_parents(self, iteration: int, pairs: list[Pair]) -> list[float]:
        """Each (parent, chunk)'s scores on its minibatch, in order, flat."""
        examples = self.sampler.ids(iteration, [chunk for _, chunk in pairs])
        rows = self.evaluate([int(parent) for parent, _ in pairs], examples)
        self.sums = {pair: sum(row) for pair, row in zip(pairs, rows, strict=True)}
        self.perfect_pairs = {pair for pair, row in zip(pairs, rows, strict=True) if min(row) >= 1}
        return [score for row in rows for score in row]

    def perfect(self, pairs: list[Pair]) -> set[Pair]:
        """The pairs whose parent scored perfectly on its whole minibatch."""
        return self.perfect_pairs

    def evaluate_children(self, iteration: int, tasks: list[ProposalTask]) -> list[float]:
        """Each task's child, proposed and scored on its minibatch, in order, flat; each
        task's minibatch sums, its parent's and its child's."""
        examples = self.sampler.ids(iteration, [task.chunk for task in tasks])
        self.children, rows = self.propose([int(task.parent) for task in tasks], examples)
        for task, row in zip(tasks, rows, strict=True):
            task.before, task.after = self.sums[task.parent, task.chunk], sum(row)
        return [score for row in rows for score in row]

    def passing(self, tasks: list[ProposalTask]) -> list[ProposalTask]:
        """gepa's judge: the children whose minibatch sum beats their parent's."""
        return [task for task in tasks if task.after > task.before]

    def most_improved_first(self, passing: list[ProposalTask]) -> list[ProposalTask]:
        """Most improved first, ties in order (a stable sort), as gepa ranks them."""
        return sorted(passing, key=lambda task: task.before - task.after)

    def join(self, tasks: list[ProposalTask], joined: list[ProposalTask]) -> list[float]:
        """The joined children enter the pool; their validation scores, one after another."""
        index = {id(task): i for i, task in enumerate(tasks)}
        scores = self.add(self.children, [index[id(task)] for task in joined])
        return np.concatenate(scores).tolist()

    def evaluate(self, candidates: list[int], examples: list[list[int]]) -> list[list[float]]:
        """Each candidate's scores on its row of train examples (one evaluation each)."""
        normal, noise, binary, score = self.normal, self.noise, self.binary, self.score
        difficulty = self.train_difficulty
        repeats = self.repeats
        last = repeats.last
        rows = []
        for candidate, row in zip(candidates, examples, strict=True):
            theta, residual = self.quality[candidate], self.train_residual_values(candidate)
            if noise:
                xs = [theta - difficulty[e] + residual[e] + noise * normal() for e in row]
            else:
                xs = [theta - difficulty[e] + residual[e] for e in row]
            scores = [1.0 if x >= 0 else 0.0 for x in xs] if binary else [score(x) for x in xs]
            rows.append(scores)
            for e, value in zip(row, scores, strict=True):  # Repeats.add, inline: the hot path
                before = last.get((candidate, e))
                if before is not None:
                    repeats.repeated += 1
                    repeats.agreed += before == value
                last[candidate, e] = value
        return rows

    def propose(
        self, parents: list[int], examples: list[list[int]]
    ) -> tuple[Children, list[list[float]]]:
        """One child of each parent, its quality changed and its residuals inherited,
        scored on its row of train examples."""
        model, normal, noise, score = self.model, self.normal, self.noise, self.score
        inherit, fresh, binary = model.inherit, model.fresh_share, self.binary
        difficulty = self.train_difficulty
        children = Children([], [], [])
        rows = []
        for parent, row in zip(parents, examples, strict=True):
            theta = self.quality[parent]
            theta += model.reach(theta) * (model.change_mean + model.change_sd * normal())
            inherited = self.train_residual_values(parent)
            residuals: dict[int, float] = {}
            scores = []
            for e in row:
                if e not in residuals:  # a padded minibatch may hold an example twice
                    residuals[e] = inherit * inherited[e] + fresh * normal()
                x = theta - difficulty[e] + residuals[e]
                if noise:
                    x += noise * normal()
                scores.append((1.0 if x >= 0 else 0.0) if binary else score(x))
            children.parents.append(parent)
            children.quality.append(theta)
            children.residuals.append(residuals)
            rows.append(scores)
        return children, rows

    def add(self, children: Children, which: list[int]) -> list[np.ndarray]:
        """Children `which` join the pool, in order: each validated (its residuals on the
        train examples are drawn when first needed), and the front updated."""
        model = self.model
        scores = []
        for i in which:
            parent = children.parents[i]
            fresh = self.rng.standard_normal(len(self.val_difficulty))
            self.pending[len(self.quality)] = (parent, children.residuals[i])
            val_residuals = model.inherit * self.val_residuals[parent] + model.fresh_share * fresh
            scores.append(self._join(children.quality[i], None, val_residuals, parent))
        return scores

    def _join(
        self, quality: float, train: np.ndarray | None, val: np.ndarray, parent: int
    ) -> np.ndarray:
        """A candidate joins the pool, validated: its scores join the front. `train`: its
        train residuals (None: drawn when first needed, train_residual); `parent`: its
        reflective parent (-1: none)."""
        self.quality.append(quality)
        self.train_residuals.append(train)
        self.train_residual_list.append(None if train is None else train.tolist())
        self.val_residuals.append(val)
        scores = self.val_scores(quality, val)
        self.front.add(scores)
        self.parent.append(parent)
        self.validated.append(scores)
        return scores

    # -- gepa's merge ------------------------------------------------------------------

    def dominators(self) -> list[int]:
        """The candidates gepa may merge: those its parent draw weighs (not dominated)."""
        return self.front.weights()[0]

    @property
    def merge_scores(self) -> list[float]:
        """Each candidate's mean validation score, as gepa's merge weighs them."""
        return self.front.means

    def merge_subsample(self, first: int, second: int) -> list[int]:
        return subsample(self.validated[first], self.validated[second], self.rng)

    def evaluate_merge(self, merge: MergeTask) -> list[float]:
        """The merged program's scores on its subsample; the sums gepa judges it by."""
        first, second = merge.triplet.first, merge.triplet.second
        merge.child = self.merge(first, second)
        child = merge.child
        scores = self.val_scores(child.quality, child.val_residuals, merge.examples).tolist()
        known = (self.validated[p][merge.examples] for p in (first, second))
        merge.before = max(float(row.sum()) for row in known)
        merge.after = sum(scores)
        return scores

    def judge_merge(self, merge: MergeTask) -> bool:
        """gepa's verdict: the merged sum reaches its better parent's."""
        return merge.after >= merge.before

    def join_merge(self, merge: MergeTask) -> list[float]:
        """The accepted merge joins the pool; its validation scores. Two parents: no
        reflective gain (val_gain)."""
        child = merge.child
        return self._join(child.quality, child.train_residuals, child.val_residuals, -1).tolist()

    def merge(self, first: int, second: int) -> MergedChild:
        """The merged program of `first` and `second` (pxn.quality's merge)."""
        pick = self.model.merge_pick
        quality = self.quality
        mean = (quality[first] + quality[second]) / 2
        train_taken = self._taken(
            quality[first] + self.train_residual(first),
            quality[second] + self.train_residual(second),
            pick,
        )
        theta = mean + float(np.mean(train_taken[0] - train_taken[1]))
        val_taken, _ = self._taken(
            quality[first] + self.val_residuals[first],
            quality[second] + self.val_residuals[second],
            pick,
        )
        return MergedChild(theta, train_taken[0] - theta, val_taken - theta)

    def _taken(
        self, first: np.ndarray, second: np.ndarray, pick: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per example, the latent a merge takes (the better one with chance `pick`), and the
        parents' mean latent there."""
        better = self.rng.random(len(first)) < pick
        higher, lower = np.maximum(first, second), np.minimum(first, second)
        return np.where(better, higher, lower), (first + second) / 2

    @property
    def seed_score(self) -> float:
        return self.front.means[0]

    def figures(self) -> SearchFigures:
        """The run's SearchFigures, as summarize() reads them off a recorded run."""
        means = self.front.means
        gains = [means[c] - means[p] for c, p in enumerate(self.parent) if p >= 0]
        return SearchFigures(
            val_gain=sum(gains) / len(gains) if gains else math.nan,
            example_spread=example_spread(self.validated),
            repeat_agreement=self.repeats.agreement,
        )

    @property
    def best_score(self) -> float:
        """The mean validation score of gepa's best candidate."""
        return max(self.front.means)

    @property
    def test_score(self) -> float:
        """gepa's best candidate's expected score on a fresh example."""
        return self.model.expected_score(self.quality[self.front.best_candidate])
