"""Acceptance: how often a proposal beats its parent, whether that decays, and
whether the proposals of one iteration succeed together.

The data are the gepa iterations that judged proposals: for each, the
proposals judged in its run before it (`made`: its siblings are made at once,
so they share it), the proposals it judged and how many passed. A child gepa
dropped as a duplicate of a sibling passed its judge too (bookkeeping.py).

The mean. Constant a (its MLE is the share passed, with a Wilson interval),
or the decay a(i) = a0 exp(-i / tau), fitted by maximum likelihood treating
each proposal as a Bernoulli trial at its iteration's mean. Constant is kept
unless the decay is supported, by a test that must be honest on small
samples: a permutation test over iterations. Under constant acceptance the iterations
are exchangeable, so the passed counts of the iterations that judged as many
proposals could have come in any order. The p-value is the share of random
rearrangements whose likelihood-ratio statistic reaches the data's: valid
whatever the rate and whatever the within-iteration correlation, and an iteration's
siblings, made at once, move together. Below DECAY_MIN_PROPOSALS
proposals, DECAY_MIN_ACCEPTED accepted or DECAY_MIN_STEPS iterations, decay is
not testable and acceptance is constant.

tau is searched from a floor (Steps.tau_floor): at least one iteration (a faster
decay leaves every iteration after the first at nought, so the data cannot tell
one such tau from another) and at least a TAU_SPAN-th of the proposals seen
(a decay that ends within the first tenth of the data is the first few
iterations, not a trend). A fit at the floor says so. A fitted decay stops at `decay_until`,
the most proposals any iteration the fit saw was made after: it says nothing
about a run that goes on longer.

The correlation. Siblings share their parent and their moment in the run;
with intra-iteration correlation rho an iteration's rate is drawn from a Beta with the
iteration's mean a (the beta-binomial model). rho is fitted by maximum likelihood
given the chosen mean, and kept only when the binomial (rho = 0) is rejected:
rho = 0 lies on the boundary, so the likelihood-ratio statistic is referred to
the 50:50 mixture of chi-square(0) and chi-square(1) (conservative at small
samples).
Iterations that judged one proposal say nothing about it, and fewer than
CORRELATION_MIN_STEPS iterations of two proposals or more are not tested.

Batched iterations. When the traces hold runs of one proposal per iteration and runs of
several, a0 is the single iterations' and `batched` the batched iterations' a0 over it,
each fitted by maximum likelihood with the mean's decay rate held (for a
constant: the two shares passed). It is fitted whenever both kinds judged
RATIO_MIN_PROPOSALS proposals or more, supported or not: a batched iteration is a
different draw from gepa's judge, not a trend to extrapolate, and the parameter
draws carry how well a few batched iterations pin it. Whether the data tell it from
1 is a likelihood-ratio test against one a0 for both (chi-square(1); with a
kept correlation, on the beta-binomial). Where the traces cannot fit it (one
kind of iteration only), the point estimate keeps 1 and the parameter draws take
it from a prior (BATCHED_PRIOR_LOG_SD), so predictions of the kind never run
carry not knowing it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.acceptance import Acceptance
from pxn.errors import PxnError

DECAY_ALPHA = 0.05  # significance the decay must reach to replace the constant
# Below any of these, decay is not testable: acceptance stays constant.
DECAY_MIN_PROPOSALS = 20
DECAY_MIN_ACCEPTED = 5
DECAY_MIN_STEPS = 5
DECAY_PERMUTATIONS = 199  # rearrangements of the iterations for the decay's p-value
TAU_SPAN = 10  # tau is at least the proposals seen / TAU_SPAN
CORRELATION_ALPHA = 0.05
CORRELATION_MIN_STEPS = 5  # iterations of two proposals or more the correlation test needs
RATIO_MIN_PROPOSALS = 10  # judged by single iterations, and by batched ones, to fit `batched`
RATIO_ALPHA = 0.05
# Where the traces cannot pin `batched`, parameter draws take it from a lognormal
# prior with median 1: the paper's figures imply one rate for single and 2x2 iterations, the
# local study's task 0.69; the prior's 90% range, 0.66 to 1.51, holds both and is
# symmetric about 1 on the log scale, so it says "unknown", not "lower".
BATCHED_PRIOR_LOG_SD = 0.25
BATCHED_PRIOR_SEED = 20261204
SEED = 20260731  # fixed, so the same traces give the same p-value
SLOWEST_RATE = 0.02  # decay rates searched start at this / (the proposals seen): nearly constant
RATE_POINTS = 47
RHO_MAX = 0.999
_EPS = 1e-9
_NEWTON_STEPS = 12
_CHUNK = 16  # rearranged data sets profiled at once (bounds the memory of the search)


@dataclass(frozen=True)
class Steps:
    """The judged iterations of one or more runs, one entry per iteration."""

    made: np.ndarray  # proposals judged in the run before this iteration
    judged: np.ndarray
    passed: np.ndarray
    batched: np.ndarray  # bool: the iteration's run proposes more than one at a time

    @classmethod
    def of(cls, made, judged, passed, batched=None) -> Steps:
        columns = (np.asarray(v, dtype=float) for v in (made, judged, passed))
        made, judged, passed = columns
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


@dataclass(frozen=True)
class CorrelationFit:
    identified: bool  # some iteration judged two proposals or more
    rho: float  # maximum-likelihood estimate given the chosen mean (0 when not identified)
    lr_statistic: float
    pvalue: float  # chi-bar-square: half the chi-square(1) tail
    chosen: float
    reason: str


@dataclass(frozen=True)
class BatchedFit:
    identified: bool  # both single and batched iterations judged enough proposals
    single: tuple[int, int]  # accepted, judged: single iterations
    batched: tuple[int, int]  # accepted, judged: batched iterations
    ratio: float  # the batched iterations' a0 over the single iterations' (1 when not identified)
    interval: tuple[float, float]  # 95%, Katz's log interval on the counts
    lr_statistic: float
    pvalue: float  # against one a0 for both; nan when not identified
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
    lr_pvalue: float  # permutation test over iterations; nan when not testable
    decay_until: float  # the most proposals any iteration was made after
    tau_floor: float  # the smallest tau searched (inf with one moment only)
    correlation: CorrelationFit
    batched: BatchedFit
    chosen: Acceptance
    reason: str

    @property
    def rate(self) -> float:
        return self.accepted / self.proposals


def _log_likelihood(steps: Steps, passed: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Bernoulli log-likelihood summed over the last axis (iterations); p broadcasts against it."""
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.sum(passed * np.log(p) + (steps.judged - passed) * np.log1p(-p), axis=-1)


def _profile(steps: Steps, passed: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    return a, _log_likelihood(steps, x, a[..., None] * w)


def _decay_statistic(steps: Steps, passed: np.ndarray) -> np.ndarray:
    """Twice the log-likelihood gain of the best decay on the grid over constant (rate 0)."""
    _, ll = _profile(steps, passed, steps.rates())
    return 2 * (ll.max(axis=-1) - ll[..., 0])


def fit_decay(steps: Steps) -> tuple[float, float, float]:
    """(a0, rate per proposal, log-likelihood) of the decay's maximum-likelihood fit.

    The rate is at most 1 / tau_floor; 0 when the iterations hold one moment only.
    """
    if steps.until <= 0:
        a = steps.accepted / steps.proposals
        return a, 0.0, float(_log_likelihood(steps, steps.passed, np.full(len(steps.made), a)))
    grid = steps.rates()
    a, ll = _profile(steps, steps.passed, grid)
    best = int(np.argmax(ll))
    if best == 0:
        return float(a[0]), 0.0, float(ll[0])
    # Refine between the grid's neighbours of the best rate.
    low, high = grid[best - 1], grid[min(best + 1, len(grid) - 1)]

    def negative(rate: float) -> float:
        return -float(_profile(steps, steps.passed, np.array([rate]))[1][0])

    result = scipy.optimize.minimize_scalar(negative, bounds=(low, high), method="bounded")
    rate = float(result.x) if -result.fun > ll[best] else float(grid[best])
    a_at, ll_at = _profile(steps, steps.passed, np.array([rate]))
    return float(a_at[0]), rate, float(ll_at[0])


def permuted_passed(steps: Steps, rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` rearrangements of the passed counts among the iterations that judged as many."""
    rearranged = np.tile(steps.passed, (size, 1))
    for judged in np.unique(steps.judged):
        columns = np.flatnonzero(steps.judged == judged)
        rearranged[:, columns] = rng.permuted(rearranged[:, columns], axis=1)
    return rearranged


def decay_pvalue(steps: Steps, statistic: float) -> float:
    """The share of rearranged iterations whose decay statistic reaches the data's.

    Sequential (Besag and Clifford): rearranging stops once enough of them reach
    the statistic that the p-value cannot fall below DECAY_ALPHA. The iterations are
    put in one order first, so the p-value depends on which iterations there are,
    not on the order the traces were read in.
    """
    steps = steps.take(np.lexsort((steps.batched, steps.passed, steps.judged, steps.made)))
    rng = np.random.default_rng(SEED)
    reached = done = 0
    while done < DECAY_PERMUTATIONS:
        size = min(_CHUNK, DECAY_PERMUTATIONS - done)
        rearranged = permuted_passed(steps, rng, size)
        reached += int(np.sum(_decay_statistic(steps, rearranged) >= statistic - 1e-9))
        done += size
        if (reached + 1) / (DECAY_PERMUTATIONS + 1) > DECAY_ALPHA:
            return (reached + 1) / (done + 1)
    return (reached + 1) / (DECAY_PERMUTATIONS + 1)


def decay_untestable(steps: Steps) -> str:
    """Why the iterations cannot carry a decay test ("" when they can)."""
    wanting = [
        f"{have} {what} (needs {need})"
        for have, need, what in (
            (steps.proposals, DECAY_MIN_PROPOSALS, "proposals"),
            (steps.accepted, DECAY_MIN_ACCEPTED, "accepted"),
            (len(steps.made), DECAY_MIN_STEPS, "iterations"),
        )
        if have < need
    ]
    if steps.accepted == steps.proposals:
        wanting.append("every proposal accepted")
    elif steps.until <= 0:
        wanting.append("every iteration made at the run's start")
    return ", ".join(wanting)


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
    """rho's maximum-likelihood estimate given each iteration's mean (0 at the boundary)."""
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
            False, 0.0, 0.0, 1.0, 0.0,
            "not identifiable: no iteration judged two proposals or more; kept 0",
        )  # fmt: skip
    if several.sum() < CORRELATION_MIN_STEPS:
        return CorrelationFit(
            False, 0.0, 0.0, 1.0, 0.0,
            f"not testable: {several.sum()} iteration(s) judged two proposals or more "
            f"(needs {CORRELATION_MIN_STEPS}); kept 0",
        )  # fmt: skip
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
    words = f"LR={statistic:.2f}, p={pvalue:.2g}"
    if rho > 0 and pvalue < CORRELATION_ALPHA:
        return CorrelationFit(
            True, rho, statistic, pvalue, rho, f"correlated within an iteration ({words})"
        )
    return CorrelationFit(True, rho, statistic, pvalue, 0.0, f"kept 0: not supported ({words})")


def _decay_reason(steps: Steps, statistic: float, pvalue: float, tau: float) -> str:
    words = f"LR={statistic:.2f}, permutation p={pvalue:.2g}"
    if not pvalue < DECAY_ALPHA:
        return f"constant: decay not supported ({words})"
    reason = f"decay supported ({words})"
    if tau <= steps.tau_floor * (1 + 1e-6):
        reason += (
            f"; tau at its floor {steps.tau_floor:.4g} (one iteration, or a {TAU_SPAN}th of the "
            "proposals seen): the data cannot resolve a steeper decay"
        )
    return reason


def step_means(steps: Steps, acceptance: Acceptance) -> np.ndarray:
    """Each iteration's mean acceptance under `acceptance`, a batched iteration's by its ratio."""
    mean = np.broadcast_to(acceptance.probability(steps.made), steps.made.shape)
    scale = np.where(steps.batched, acceptance.batched, 1.0)
    return np.minimum(np.asarray(mean, dtype=float) * scale, 1.0)


def split_a0(steps: Steps, rate: float) -> tuple[float, float]:
    """a0's maximum-likelihood estimate on the single iterations and on the batched ones,
    at this decay rate per proposal (0: constant, and a0 is the share passed)."""
    a0 = []
    for rows in (~steps.batched, steps.batched):
        part = steps.take(rows)
        a0.append(float(_profile(part, part.passed, np.array([rate]))[0][0]))
    return a0[0], a0[1]


def batched_prior(rng: np.random.Generator, size: int) -> np.ndarray:
    """Ratios from the prior for a `batched` the traces cannot pin."""
    return np.exp(BATCHED_PRIOR_LOG_SD * rng.standard_normal(size))


def batched_prior_words() -> str:
    low, high = np.exp(BATCHED_PRIOR_LOG_SD * np.array([-1, 1]) * scipy.stats.norm.ppf(0.95))
    return f"lognormal, median 1, 90% in [{low:.2f}, {high:.2f}]"


def batched_unidentified(steps: Steps) -> str:
    """Why the iterations cannot fit a batched ratio ("" when they can)."""
    single = int(steps.judged[~steps.batched].sum())
    batched = int(steps.judged[steps.batched].sum())
    if batched == 0 or single == 0:
        return f"only {'single' if batched == 0 else 'batched'} iterations"
    if min(single, batched) < RATIO_MIN_PROPOSALS:
        return (
            f"{single} single and {batched} batched proposals (needs {RATIO_MIN_PROPOSALS} of each)"
        )
    if steps.passed[~steps.batched].sum() == 0:
        return "no single iteration's proposal passed"
    return ""


def fit_batched(steps: Steps, mean: Acceptance) -> tuple[BatchedFit, Acceptance]:
    """The batched iterations' ratio, and the mean acceptance with it (a0 the single ones')."""
    counts = [
        (int(steps.passed[rows].sum()), int(steps.judged[rows].sum()))
        for rows in (~steps.batched, steps.batched)
    ]
    why_not = batched_unidentified(steps)
    if why_not:
        reason = (
            f"not identifiable: {why_not}; kept 1 (every iteration the same acceptance), and "
            f"parameter draws take it from its prior ({batched_prior_words()})"
        )
        return BatchedFit(False, *counts, 1.0, (1.0, 1.0), 0.0, math.nan, reason), mean
    rate = 0.0 if mean.tau is None else 1 / mean.tau
    single, batched = split_a0(steps, rate)
    ratio = batched / single
    fit = BatchedFit(True, *counts, ratio, katz_interval(ratio, *counts), 0.0, math.nan, "")
    return fit, dataclasses.replace(mean, a0=single, batched=ratio)


def katz_interval(ratio: float, single: tuple[int, int], batched: tuple[int, int]):
    """The ratio's 95% interval on the log scale (Katz et al. 1978), half a proposal added
    to a count of nought so that the interval stays finite."""
    variance = sum(1 / max(passed, 0.5) - 1 / judged for passed, judged in (single, batched))
    half = float(scipy.stats.norm.ppf(0.975)) * math.sqrt(max(variance, 0.0))
    centre = max(ratio, 0.5 / batched[1] / (single[0] / single[1]))
    return (centre * math.exp(-half), centre * math.exp(half))


def with_ratio_test(
    steps: Steps, fit: BatchedFit, pooled: Acceptance, chosen: Acceptance
) -> BatchedFit:
    """The likelihood-ratio test of the fitted ratio against one a0 for every iteration."""
    if not fit.identified:
        return fit
    rho = chosen.correlation
    statistic = max(
        0.0,
        2
        * (
            _betabinomial(steps, step_means(steps, chosen), rho)
            - _betabinomial(steps, step_means(steps, pooled), rho)
        ),
    )
    pvalue = float(scipy.stats.chi2.sf(statistic, df=1))
    words = f"LR={statistic:.2f}, p={pvalue:.2g}"
    verdict = (
        f"batched iterations differ ({words})"
        if pvalue < RATIO_ALPHA
        else f"the data do not tell it from 1 ({words}); the draws carry its uncertainty"
    )
    return dataclasses.replace(fit, lr_statistic=statistic, pvalue=pvalue, reason=verdict)


def fit_acceptance(steps: Steps) -> AcceptanceFit:
    """Fit the mean (constant or decaying) and the within-iteration correlation."""
    n, k = steps.proposals, steps.accepted
    if n == 0:
        raise PxnError(
            "no judged proposals (decision events) in the traces: acceptance cannot be "
            "calibrated; run until at least one iteration completes"
        )
    wilson = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    rate0 = k / n
    constant_ll = float(_log_likelihood(steps, steps.passed, np.full(len(steps.made), rate0)))
    a0, rate, decay_ll = fit_decay(steps) if 0 < k < n else (rate0, 0.0, constant_ll)
    statistic = max(0.0, 2 * (decay_ll - constant_ll))
    tau = 1 / rate if rate > 0 else math.inf
    untestable = decay_untestable(steps)
    if untestable:
        pvalue = math.nan
        reason = f"constant: decay not testable: {untestable} (LR={statistic:.2f})"
    else:
        pvalue = decay_pvalue(steps, float(_decay_statistic(steps, steps.passed)))
        reason = _decay_reason(steps, statistic, pvalue, tau)
    if pvalue < DECAY_ALPHA and math.isfinite(tau):
        pooled = Acceptance(a0, tau, decay_until=steps.until)
    else:
        pooled = Acceptance(rate0)
    batched, chosen = fit_batched(steps, pooled)
    correlation = fit_correlation(steps, step_means(steps, chosen))
    if correlation.chosen:
        chosen = dataclasses.replace(chosen, correlation=correlation.chosen)
        pooled = dataclasses.replace(pooled, correlation=correlation.chosen)
    batched = with_ratio_test(steps, batched, pooled, chosen)
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
        decay_until=steps.until,
        tau_floor=steps.tau_floor,
        correlation=correlation,
        batched=batched,
        chosen=chosen,
        reason=reason,
    )
