"""The judged iterations acceptance is fitted to (Steps), and their likelihoods: each
proposal a Bernoulli trial at its iteration's mean, a0 profiled for each decay rate, and
the beta-binomial of a correlation within an iteration. The fits are acceptance.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.acceptance import Acceptance

TAU_SPAN = 10  # tau is at least the proposals seen / TAU_SPAN
SLOWEST_RATE = 0.02  # decay rates searched start at this / (the proposals seen): nearly constant
RATE_POINTS = 47
_EPS = 1e-9
_NEWTON_STEPS = 12


@dataclass(frozen=True)
class Steps:
    """The judged iterations of one or more runs, one entry per iteration."""

    made: np.ndarray  # proposals judged in the run before this iteration
    judged: np.ndarray
    passed: np.ndarray
    batched: np.ndarray  # bool: the iteration's run proposes more than one at a time

    @classmethod
    def of(cls, made, judged, passed, batched=None) -> Steps:
        made, judged, passed = (np.asarray(v, dtype=float) for v in (made, judged, passed))
        flags = np.zeros(len(made), dtype=bool) if batched is None else np.asarray(batched, bool)
        return cls(made, judged, passed, flags)

    def take(self, rows: np.ndarray) -> Steps:
        return Steps(self.made[rows], self.judged[rows], self.passed[rows], self.batched[rows])

    @property
    def proposals(self) -> int:
        return int(self.judged.sum())

    @property
    def accepted(self) -> int:
        return int(self.passed.sum())

    @property
    def until(self) -> float:
        """The most proposals any iteration was made after."""
        return float(self.made.max())

    @property
    def tau_floor(self) -> float:
        """The steepest decay the data resolve: one iteration, and a TAU_SPAN-th of the span."""
        positive = self.made[self.made > 0]
        return float(max(positive.min(), self.until / TAU_SPAN)) if len(positive) else math.inf

    def rates(self) -> np.ndarray:
        """The decay rates (per proposal) searched: 0, then up to 1 / tau_floor."""
        slowest = SLOWEST_RATE / self.until
        return np.concatenate([[0.0], np.geomspace(slowest, 1 / self.tau_floor, RATE_POINTS)])


def bernoulli_log_likelihood(steps: Steps, passed: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Bernoulli log-likelihood summed over the last axis (iterations); p broadcasts against it."""
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.sum(passed * np.log(p) + (steps.judged - passed) * np.log1p(-p), axis=-1)


def profile_a0(
    steps: Steps, passed: np.ndarray, rates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each decay rate, a0's MLE and the log-likelihood there.

    `passed` is (..., iterations): one row per data set. Returns arrays of shape
    (..., rates). a0's log-likelihood is concave, so Newton's method from the
    moment estimate converges in a few steps; it is kept inside (0, 1).
    """
    w = np.exp(-np.outer(rates, steps.made))  # (rates, iterations)
    x = passed[..., None, :]  # (..., 1, iterations)
    failed = steps.judged - x
    a = np.sum(x, axis=-1) / np.sum(steps.judged * w, axis=-1)
    a = np.clip(a, _EPS, 1 - _EPS)
    for _ in range(_NEWTON_STEPS):
        aw = np.clip(a[..., None] * w, _EPS, 1 - _EPS)
        gradient = np.sum(x / a[..., None] - failed * w / (1 - aw), axis=-1)
        curvature = -np.sum(x / a[..., None] ** 2 + failed * (w / (1 - aw)) ** 2, axis=-1)
        step = np.where(curvature < 0, gradient / np.minimum(curvature, -_EPS), 0.0)
        a = np.clip(a - step, _EPS, 1 - _EPS)
    return a, bernoulli_log_likelihood(steps, x, a[..., None] * w)


def betabinomial_log_likelihood(steps: Steps, mean: np.ndarray, rho: float) -> float:
    m = np.clip(mean, _EPS, 1 - _EPS)
    if rho <= 0:
        return float(np.sum(scipy.stats.binom.logpmf(steps.passed, steps.judged, m)))
    spread = 1 / rho - 1
    return float(
        np.sum(
            scipy.stats.betabinom.logpmf(steps.passed, steps.judged, m * spread, (1 - m) * spread)
        )
    )


def step_means(steps: Steps, acceptance: Acceptance) -> np.ndarray:
    """Each iteration's mean acceptance under `acceptance`, a batched iteration's by its ratio."""
    mean = np.broadcast_to(acceptance.probability(steps.made), steps.made.shape)
    scale = np.where(steps.batched, acceptance.batched, 1.0)
    return np.minimum(np.asarray(mean, dtype=float) * scale, 1.0)
