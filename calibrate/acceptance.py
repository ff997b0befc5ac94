"""Acceptance: how often a proposal beats its parent, whether that decays, and
whether the proposals of one step succeed together.

The data are steps (gepa iterations that judged proposals): for each, the
proposals judged in its run before it (`made`: its siblings are made at once,
so they share it), the proposals it judged and how many passed. A child gepa
dropped as a duplicate of a sibling passed its judge too (bookkeeping.py).

The mean. Constant a (its MLE is the share passed, with a Wilson interval),
or the decay a(i) = a0 exp(-i / tau), fitted by maximum likelihood treating
each proposal as a Bernoulli trial at its step's mean. Constant is kept
unless the decay is supported, and the test must be honest on small
samples: with a handful of proposals the chi-square reference is far off (a
run of 4 proposals, the first accepted and the rest not, is fitted perfectly
by a steep decay and gives p = 0.034; under constant acceptance the
chi-square test claimed decay 11.5% of the time at 4 proposals). So the
p-value is a parametric bootstrap: the likelihood-ratio statistic of the
data against its distribution in runs of the same steps simulated from the
fitted constant model (with the fitted within-step correlation); and no
decay is claimed from fewer than DECAY_MIN_PROPOSALS proposals. A fitted
decay stops at `decay_until`, the most proposals any step the fit saw was
made after: it says nothing about a run that goes on longer.

The correlation. Siblings share their parent and their moment in the run;
with intra-step correlation rho a step's rate is drawn from a Beta with the
step's mean a (the beta-binomial model). rho is fitted by maximum likelihood
given the chosen mean, and kept only when the binomial (rho = 0) is rejected:
rho = 0 lies on the boundary, so the likelihood-ratio statistic is referred to
the 50:50 mixture of chi-square(0) and chi-square(1). Steps that judged one
proposal say nothing about it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.acceptance import Acceptance
from pxn.errors import PxnError

DECAY_ALPHA = 0.05  # significance the decay must reach to replace the constant
DECAY_MIN_PROPOSALS = 20  # fewer judged proposals than this never claim a decay
DECAY_BOOTSTRAP = 199  # simulated data sets for the decay's p-value
CORRELATION_ALPHA = 0.05
SEED = 20260731  # fixed, so the same traces give the same p-value
# Decay rates searched, in units of 1 / (the most proposals any step was made after).
RATE_GRID = np.concatenate([[0.0], np.geomspace(0.02, 50.0, 47)])
RHO_MAX = 0.999
_EPS = 1e-9
_NEWTON_STEPS = 12
_CHUNK = 16  # simulated data sets profiled at once (bounds the memory of the search)


@dataclass(frozen=True)
class Steps:
    """The judged steps of one or more runs, one entry per step."""

    made: np.ndarray  # proposals judged in the run before this step
    judged: np.ndarray
    passed: np.ndarray

    @classmethod
    def of(cls, made, judged, passed) -> Steps:
        return cls(*(np.asarray(v, dtype=float) for v in (made, judged, passed)))

    def take(self, rows: np.ndarray) -> Steps:
        return Steps(self.made[rows], self.judged[rows], self.passed[rows])

    @property
    def proposals(self) -> int:
        return int(self.judged.sum())

    @property
    def accepted(self) -> int:
        return int(self.passed.sum())


@dataclass(frozen=True)
class CorrelationFit:
    identified: bool  # some step judged two proposals or more
    rho: float  # maximum-likelihood estimate given the chosen mean (0 when not identified)
    lr_statistic: float
    pvalue: float  # chi-bar-square: half the chi-square(1) tail
    chosen: float
    reason: str


@dataclass(frozen=True)
class AcceptanceFit:
    steps: int
    proposals: int
    accepted: int
    wilson: tuple[float, float]  # 95% interval of the constant probability
    constant_log_likelihood: float
    decay_a0: float
    decay_tau: float  # proposals; inf when the MLE is no decay at all
    decay_log_likelihood: float
    lr_statistic: float
    lr_pvalue: float  # parametric bootstrap; nan when too few proposals to test
    decay_until: float  # the most proposals any step was made after
    correlation: CorrelationFit
    chosen: Acceptance
    reason: str

    @property
    def rate(self) -> float:
        return self.accepted / self.proposals


def _log_likelihood(steps: Steps, passed: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Bernoulli log-likelihood summed over the last axis (steps); p broadcasts against it."""
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.sum(passed * np.log(p) + (steps.judged - passed) * np.log1p(-p), axis=-1)


def _profile(steps: Steps, passed: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each decay rate, a0's MLE and the log-likelihood there.

    `passed` is (..., steps): one row per data set. Returns arrays of shape
    (..., rates). a0's log-likelihood is concave, so Newton's method from the
    moment estimate converges in a few steps; it is kept inside (0, 1).
    """
    w = np.exp(-np.outer(rates, steps.made))  # (rates, steps)
    x = passed[..., None, :]  # (..., 1, steps)
    failed = steps.judged - x
    a = np.sum(x, axis=-1) / np.sum(steps.judged * w, axis=-1)
    a = np.clip(a, _EPS, 1 - _EPS)
    for _ in range(_NEWTON_STEPS):
        aw = np.clip(a[..., None] * w, _EPS, 1 - _EPS)
        gradient = np.sum(x / a[..., None] - failed * w / (1 - aw), axis=-1)
        curvature = -np.sum(x / a[..., None] ** 2 + failed * (w / (1 - aw)) ** 2, axis=-1)
        step = np.where(curvature < 0, gradient / np.minimum(curvature, -_EPS), 0.0)
        a = np.clip(a - step, _EPS, 1 - _EPS)
    return a, _log_likelihood(steps, x, a[..., None] * w)


def _rate_unit(steps: Steps) -> float:
    return float(max(steps.made.max(), 1.0))


def _decay_statistic(steps: Steps, passed: np.ndarray) -> np.ndarray:
    """Twice the log-likelihood gain of the best decay on the grid over constant (rate 0)."""
    _, ll = _profile(steps, passed, RATE_GRID / _rate_unit(steps))
    return 2 * (ll.max(axis=-1) - ll[..., 0])


def fit_decay(steps: Steps) -> tuple[float, float, float]:
    """(a0, rate per proposal, log-likelihood) of the decay's maximum-likelihood fit."""
    unit = _rate_unit(steps)
    a, ll = _profile(steps, steps.passed, RATE_GRID / unit)
    best = int(np.argmax(ll))
    if best == 0:
        return float(a[0]), 0.0, float(ll[0])
    # Refine between the grid's neighbours of the best rate.
    low, high = RATE_GRID[best - 1] / unit, RATE_GRID[min(best + 1, len(RATE_GRID) - 1)] / unit

    def negative(rate: float) -> float:
        return -float(_profile(steps, steps.passed, np.array([rate]))[1][0])

    result = scipy.optimize.minimize_scalar(negative, bounds=(low, high), method="bounded")
    rate = float(result.x) if -result.fun > ll[best] else RATE_GRID[best] / unit
    a_at, ll_at = _profile(steps, steps.passed, np.array([rate]))
    return float(a_at[0]), rate, float(ll_at[0])


def simulate_passed(
    steps: Steps, mean: np.ndarray, rho: float, rng: np.random.Generator, size: int
) -> np.ndarray:
    """`size` data sets of the steps' passed counts: binomial, or beta-binomial with rho."""
    p = np.broadcast_to(mean, (size, len(steps.made)))
    if rho > 0:
        spread = 1 / rho - 1
        clipped = np.clip(p, _EPS, 1 - _EPS)
        p = rng.beta(clipped * spread, (1 - clipped) * spread)
    return rng.binomial(steps.judged.astype(int), p).astype(float)


def decay_pvalue(steps: Steps, statistic: float, a: float, rho: float) -> float:
    """The share of data sets simulated from constant a (and rho) whose statistic reaches it.

    Sequential (Besag and Clifford): simulation stops once enough data sets reach the
    statistic that the p-value cannot fall below DECAY_ALPHA.
    """
    rng = np.random.default_rng(SEED)
    reached = done = 0
    while done < DECAY_BOOTSTRAP:
        size = min(_CHUNK, DECAY_BOOTSTRAP - done)
        simulated = simulate_passed(steps, np.full(len(steps.made), a), rho, rng, size)
        reached += int(np.sum(_decay_statistic(steps, simulated) >= statistic - 1e-9))
        done += size
        if (reached + 1) / (DECAY_BOOTSTRAP + 1) > DECAY_ALPHA:
            return (reached + 1) / (done + 1)
    return (reached + 1) / (DECAY_BOOTSTRAP + 1)


def _betabinomial(steps: Steps, mean: np.ndarray, rho: float) -> float:
    m = np.clip(mean, _EPS, 1 - _EPS)
    if rho <= 0:
        return float(np.sum(scipy.stats.binom.logpmf(steps.passed, steps.judged, m)))
    spread = 1 / rho - 1
    return float(
        np.sum(
            scipy.stats.betabinom.logpmf(steps.passed, steps.judged, m * spread, (1 - m) * spread)
        )
    )


def fit_rho(steps: Steps, mean: np.ndarray) -> float:
    """rho's maximum-likelihood estimate given each step's mean (0 at the boundary)."""
    several = steps.judged >= 2
    if not several.any():
        return 0.0
    informative, m = steps.take(several), mean[several]
    result = scipy.optimize.minimize_scalar(
        lambda rho: -_betabinomial(informative, m, rho), bounds=(1e-6, RHO_MAX), method="bounded"
    )
    if -result.fun <= _betabinomial(informative, m, 0.0):
        return 0.0
    return float(result.x)


def fit_correlation(steps: Steps, mean: np.ndarray) -> CorrelationFit:
    several = steps.judged >= 2
    m = np.clip(mean, 0.0, 1.0)
    if not several.any() or np.all((m <= 0) | (m >= 1)):
        return CorrelationFit(
            False,
            0.0,
            0.0,
            1.0,
            0.0,
            "not identifiable: no step judged two proposals or more; kept 0",
        )
    rho = fit_rho(steps, mean)
    informative = steps.take(several)
    statistic = max(
        0.0,
        2
        * (
            _betabinomial(informative, mean[several], rho)
            - _betabinomial(informative, mean[several], 0.0)
        ),
    )
    pvalue = 0.5 * float(scipy.stats.chi2.sf(statistic, df=1)) if statistic > 0 else 1.0
    if rho > 0 and pvalue < CORRELATION_ALPHA:
        return CorrelationFit(
            True,
            rho,
            statistic,
            pvalue,
            rho,
            f"correlated within a step (LR={statistic:.2f}, p={pvalue:.2g})",
        )
    return CorrelationFit(
        True,
        rho,
        statistic,
        pvalue,
        0.0,
        f"kept 0: not supported (LR={statistic:.2f}, p={pvalue:.2g})",
    )


def fit_acceptance(steps: Steps) -> AcceptanceFit:
    """Fit the mean (constant or decaying) and the within-step correlation."""
    n, k = steps.proposals, steps.accepted
    if n == 0:
        raise PxnError(
            "no judged proposals (decision events) in the traces: acceptance cannot be "
            "calibrated; run until at least one iteration completes"
        )
    wilson = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    rate0 = k / n
    constant = np.full(len(steps.made), rate0)
    constant_ll = float(_log_likelihood(steps, steps.passed, constant))
    a0, rate, decay_ll = rate0, 0.0, constant_ll
    statistic, pvalue = 0.0, math.nan
    until = float(steps.made.max())
    if 0 < k < n and until > 0:
        a0, rate, decay_ll = fit_decay(steps)
        statistic = float(_decay_statistic(steps, steps.passed))
        if n >= DECAY_MIN_PROPOSALS:
            pvalue = decay_pvalue(steps, statistic, rate0, fit_rho(steps, constant))
    tau = 1 / rate if rate > 0 else math.inf
    decays = pvalue < DECAY_ALPHA and math.isfinite(tau)
    if decays:
        chosen = Acceptance(a0, tau, decay_until=until)
        reason = f"decay supported (LR={statistic:.2f}, bootstrap p={pvalue:.2g})"
    elif math.isnan(pvalue):
        chosen = Acceptance(rate0)
        reason = (
            f"constant: {n} proposals are too few to claim a decay "
            f"(needs {DECAY_MIN_PROPOSALS}; LR={statistic:.2f})"
        )
    else:
        chosen = Acceptance(rate0)
        reason = f"constant: decay not supported (LR={statistic:.2f}, bootstrap p={pvalue:.2g})"
    correlation = fit_correlation(
        steps, np.asarray(chosen.probability(steps.made)) + 0 * steps.made
    )
    if correlation.chosen:
        chosen = Acceptance(chosen.a0, chosen.tau, chosen.decay_until, correlation.chosen)
    return AcceptanceFit(
        steps=len(steps.made),
        proposals=n,
        accepted=k,
        wilson=(float(wilson.low), float(wilson.high)),
        constant_log_likelihood=constant_ll,
        decay_a0=a0,
        decay_tau=tau,
        decay_log_likelihood=decay_ll,
        lr_statistic=statistic,
        lr_pvalue=pvalue,
        decay_until=until,
        correlation=correlation,
        chosen=chosen,
        reason=reason,
    )
