"""The search's quality model: what a candidate scores, and what a proposal does to it.

Item response theory, with gepa's proposals on top. A candidate c has a
latent quality theta_c; an example e a difficulty d_e ~ N(0, difficulty_sd^2);
and each (candidate, example) pair a residual z_ce ~ N(0, 1) that the
candidate keeps (what it gets right or wrong there for reasons of its own).
One evaluation of c on e sees

    x = theta_c - d_e + z_ce + eval_noise * eta,    eta ~ N(0, 1) fresh each time,

and the metric scores it:

    binary       1 if x >= 0, else 0
    graded (L)   (1/L) #{i : x >= t_i},  t_i = Phi^-1(i / (L + 1)),  i = 1..L
                 (L + 1 grades 0, 1/L, ..., 1; binary is L = 1)
    continuous   Phi(x)

A proposal from parent p is a child with theta = theta_p + delta,

    delta ~ N(change_mean h(theta_p), (change_sd h(theta_p))^2),
    h(theta) = max(0, (theta* - theta) / (theta* - theta_0)),

theta_0 the seed's quality and theta* the quality whose expected score is
`ceiling` (ceiling = 1: h = 1; a ceiling at or below the seed's score: h = 0).
Residuals z_child = inherit z_parent + sqrt(1 - inherit^2) xi, xi ~ N(0, 1).

A candidate's expected score on a fresh example (its test score) is
s(theta) = E[score(x)] over x ~ N(theta, S^2), S^2 = 1 + difficulty_sd^2 +
eval_noise^2:

    binary, graded   (1/L) sum_i Phi((theta - t_i) / S)
    continuous       Phi(theta / sqrt(1 + S^2))

and theta_0 is the quality with s(theta_0) = seed_score. Latent units are
those of the residual (sd 1).

A merge of candidates i and j (gepa's use_merge) takes, on each train and
validation example, the latent theta + z of the parent doing better there
with chance `merge_pick`, the other's otherwise. Its quality is

    theta_m = (theta_i + theta_j) / 2 + mean_e (taken_e - (l_ie + l_je) / 2)

over the train examples, and its residual on an example what it took less theta_m.

The seed's measured validation scores (`seed_validation`) condition the
validation examples: each bounds the latent of that first evaluation,
x_e = theta_0 + t_e with t_e = -d_e + z_0e + eval_noise eta_e ~ N(0, S^2), to
the interval the metric maps onto it (a continuous score: the point
Phi^-1(score)). t_e is drawn from N(0, S^2) truncated there, then split into
its three normal parts given their sum (each g_i ~ N(0, v_i), plus v_i / S^2
times what the sum lacks); d_e and z_0e are kept, the noise is not: a new
run's seed is evaluated afresh.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from pxn.errors import PxnError
from pxn.fields import at_least, is_number, share, table

METRICS = ("binary", "graded", "continuous")
# Qualities are searched for in [-LATENT_RANGE, LATENT_RANGE]: scores at its ends
# differ from 0 and 1 by less than a float can tell at any spread the model allows.
LATENT_RANGE = 60.0
MERGE_PICK = 0.5  # merge_pick's default: a merge mixes its parents blindly
NOT_FLOATS = ("metric", "levels", "seed_validation")  # [quality] fields read as they are


@dataclass(frozen=True)
class Quality:
    seed_score: float  # the seed's expected score on a fresh example
    metric: str = "binary"  # binary | graded | continuous
    levels: int = 1  # L: a graded score's grades above 0 (binary is 1)
    difficulty_sd: float = 1.0  # examples' spread in difficulty
    change_mean: float = 0.1  # a proposal's mean change of quality, from the seed
    change_sd: float = 0.3  # its spread
    ceiling: float = 1.0  # the expected score at which proposals stop changing quality
    inherit: float = 0.9  # correlation of a child's residuals with its parent's
    eval_noise: float = 0.0  # sd of the noise each evaluation adds (0: deterministic)
    merge_pick: float = MERGE_PICK  # a merge's chance to take the better parent on an example
    # The seed's measured score on each validation example, in order (empty: unknown).
    seed_validation: tuple[float, ...] = ()

    # -- the model -----------------------------------------------------------------

    @cached_property
    def thresholds(self) -> np.ndarray:
        """t_1 .. t_L, the latents at which a score rises a grade (binary: [0])."""
        grades = self.levels if self.metric == "graded" else 1
        return ndtri(np.arange(1, grades + 1) / (grades + 1))

    @property
    def spread(self) -> float:
        """S: the sd of a fresh evaluation's latent around the candidate's quality."""
        return math.sqrt(1 + self.difficulty_sd**2 + self.eval_noise**2)

    def score(self, latent: np.ndarray) -> np.ndarray:
        """What the metric gives each latent x."""
        if self.metric == "continuous":
            return ndtr(latent)
        if self.metric == "binary":
            return (latent >= 0).astype(float)
        return np.searchsorted(self.thresholds, latent, side="right") / self.levels

    def scorer(self) -> Callable[[float], float]:
        """score() of one latent, in Python floats (a minibatch's few are cheaper so)."""
        if self.metric == "continuous":
            return lambda latent: 0.5 * math.erfc(-latent / math.sqrt(2))
        if self.metric == "binary":
            return lambda latent: 1.0 if latent >= 0 else 0.0
        thresholds, levels = self.thresholds.tolist(), self.levels
        return lambda latent: bisect.bisect_right(thresholds, latent) / levels

    def expected_score(self, theta: float) -> float:
        """s(theta): the expected score on a fresh example (the test score)."""
        if self.metric == "continuous":
            return float(ndtr(theta / math.sqrt(1 + self.spread**2)))
        return float(np.mean(ndtr((theta - self.thresholds) / self.spread)))

    def quality_of(self, score: float) -> float:
        """The theta whose expected score is `score` (in (0, 1))."""
        if self.metric == "binary":
            return self.spread * float(ndtri(score))
        return brentq(lambda t: self.expected_score(t) - score, -LATENT_RANGE, LATENT_RANGE)

    @cached_property
    def seed_quality(self) -> float:
        """theta_0."""
        return self.quality_of(self.seed_score)

    @cached_property
    def ceiling_quality(self) -> float:
        """theta*: infinite when the ceiling is a perfect score."""
        return math.inf if self.ceiling >= 1 else self.quality_of(self.ceiling)

    def reach(self, theta: float) -> float:
        """h(theta): the share of a proposal's reach left to a parent of quality theta."""
        top, seed = self.ceiling_quality, self.seed_quality
        if top == math.inf:
            return 1.0
        if top <= seed:  # a seed at its ceiling already: no proposal changes quality
            return 0.0
        return max(0.0, (top - theta) / (top - seed))

    def seed_examples(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The validation examples' difficulties and the seed's residuals on them, drawn
        given the seed's measured scores (see the module docstring)."""
        low, high = self._seed_latents()
        spread = self.spread
        bounded = self._truncated_normals(rng, (low - self.seed_quality) / spread,
                                          (high - self.seed_quality) / spread) * spread  # fmt: skip
        parts = np.array([self.difficulty_sd, 1.0, self.eval_noise])[:, None]
        drawn = rng.standard_normal((3, len(low))) * parts
        drawn += parts**2 / spread**2 * (bounded - drawn.sum(axis=0))
        return -drawn[0], drawn[1]

    def _seed_latents(self) -> tuple[np.ndarray, np.ndarray]:
        """The interval each measured seed score puts its evaluation's latent in."""
        scores = np.asarray(self.seed_validation, dtype=float)
        if self.metric == "continuous":
            point = ndtri(np.clip(scores, 1e-9, 1 - 1e-9))
            return point, point
        grades = np.rint(scores * len(self.thresholds)).astype(int)
        edges = np.concatenate(([-np.inf], self.thresholds, [np.inf]))
        return edges[grades], edges[grades + 1]

    @staticmethod
    def _truncated_normals(rng: np.random.Generator, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Standard normals truncated to [a, b] by inverse CDF, each from the tail nearer
        zero (1 - Phi loses the far upper tail); a point where a = b."""
        upper = a > 0  # mirrored: drawn in [-b, -a], where the CDF is exact
        lo, hi = np.where(upper, -b, a), np.where(upper, -a, b)
        u = ndtr(lo) + rng.random(len(a)) * (ndtr(hi) - ndtr(lo))
        drawn = np.where(lo == hi, lo, ndtri(u))
        return np.where(upper, -drawn, drawn)

    @property
    def fresh_share(self) -> float:
        """sqrt(1 - inherit^2): the weight of a child's own residual."""
        return math.sqrt(1 - self.inherit**2)

    # -- checks and TOML --------------------------------------------------------------

    def validate(self) -> None:
        if self.metric not in METRICS:
            raise PxnError(f"is one of {', '.join(METRICS)}: got {self.metric!r}",
                           subject="quality metric")  # fmt: skip
        if not (isinstance(self.levels, int) and not isinstance(self.levels, bool)):
            raise PxnError(f"must be a whole number: got {self.levels!r}", subject="quality levels")
        if self.metric == "graded" and self.levels < 2:
            raise PxnError(f"must be >= 2 for a graded metric (1 is binary): got {self.levels}",
                           subject="quality levels")  # fmt: skip
        if self.metric != "graded" and self.levels != 1:
            raise PxnError(f"applies to a graded metric only: got {self.levels} for "
                           f"{self.metric}", subject="quality levels")  # fmt: skip
        if not (is_number(self.seed_score) and 0 < self.seed_score < 1):
            raise PxnError(f"must be between 0 and 1 (exclusive): got {self.seed_score!r}",
                           subject="quality seed_score")  # fmt: skip
        at_least(self.difficulty_sd, "quality difficulty_sd")
        if not (is_number(self.change_mean) and math.isfinite(self.change_mean)):
            raise PxnError(
                f"must be a number: got {self.change_mean!r}", subject="quality change_mean"
            )
        at_least(self.change_sd, "quality change_sd")
        if not (is_number(self.ceiling) and 0 < self.ceiling <= 1):
            raise PxnError(f"must be in (0, 1]: got {self.ceiling!r}", subject="quality ceiling")
        share(self.inherit, "quality inherit", top_open=True)
        at_least(self.eval_noise, "quality eval_noise")
        share(self.merge_pick, "quality merge_pick")
        self._check_seed_validation()

    def _check_seed_validation(self) -> None:
        grades = self.levels if self.metric == "graded" else 1
        for score in self.seed_validation:
            on_grade = is_number(score) and (
                self.metric == "continuous" or abs(score * grades - round(score * grades)) < 1e-9
            )
            if not (on_grade and 0 <= score <= 1):
                kind = (
                    "between 0 and 1"
                    if self.metric == "continuous"
                    else (f"a multiple of 1/{grades} in [0, 1]" if grades > 1 else "0 or 1")
                )
                raise PxnError(f"holds {score!r}: each score must be {kind} for a {self.metric} "
                               "metric", subject="quality seed_validation")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.metric != "graded":
            del data["levels"]
        if self.merge_pick == MERGE_PICK:  # a scenario without merges reads as it did
            del data["merge_pick"]
        if self.seed_validation:
            data["seed_validation"] = list(self.seed_validation)
        else:
            del data["seed_validation"]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Quality:
        given = table(data, "[quality]", {f.name for f in fields(cls)})
        if "seed_score" not in given:
            raise PxnError("needs seed_score, the seed program's expected score (0 to 1)",
                           subject="[quality]")  # fmt: skip
        values = dict(given)
        if "seed_validation" in values:
            measured = values.pop("seed_validation")
            if not (isinstance(measured, list) and all(is_number(x) for x in measured)):
                raise PxnError(f"seed_validation must be a list of scores: got {measured!r}",
                               subject="[quality]")  # fmt: skip
            values["seed_validation"] = tuple(float(x) for x in measured)
        if "metric" in values:
            values["metric"] = str(values["metric"])
        for name, value in values.items():
            if name not in NOT_FLOATS and not is_number(value):
                raise PxnError(f"{name} must be a number: got {value!r}", subject="[quality]")
        if "levels" in values and is_number(values["levels"]) and values["levels"] % 1 == 0:
            values["levels"] = int(values["levels"])
        quality = cls(**{k: v if k in NOT_FLOATS else float(v) for k, v in values.items()})
        quality.validate()
        return quality
