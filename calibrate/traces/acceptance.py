"""Acceptance: how often a proposal beats its parent, whether that decays, and
whether the proposals of one iteration succeed together (docs/calibration.md,
"Acceptance").

The data are the iterations that judged proposals (acceptance_likelihood.Steps): the
proposals judged before each (`made`, shared by its siblings), those it judged and how
many passed; a child dropped as a duplicate of a sibling passed too.

The mean is constant (the share passed, with a Wilson interval) unless the decay
a(i) = a0 exp(-i / tau) is supported by a permutation test over iterations: under a
constant rate, iterations that judged as many proposals are exchangeable, whatever the
rate and the within-iteration correlation. Below DECAY_MIN_PROPOSALS, DECAY_MIN_ACCEPTED
or DECAY_MIN_STEPS decay is not testable. tau is searched from Steps.tau_floor (a decay
faster than one iteration, or ending within a TAU_SPAN-th of the proposals seen, is not
a trend), and a fitted decay holds from `decay_until` on: the fit says nothing past it.

The within-iteration correlation rho (beta-binomial) is fitted given the mean and kept
only when the chi-bar-square test rejects rho = 0 (on the boundary); it needs
CORRELATION_MIN_STEPS iterations of two proposals or more.

The batched iterations' acceptance over the single ones' (`batched`) is fitted where the
traces hold enough of both kinds, tested against one a0 for both, else drawn from its
prior.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.acceptance_likelihood import (
    TAU_SPAN,
    Steps,
    bernoulli_log_likelihood,
    betabinomial_log_likelihood,
    profile_a0,
    step_means,
)
from pxn.errors import PxnError

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

DECAY_ALPHA = 0.05  # significance the decay must reach to replace the constant
# Below any of these, decay is not testable: acceptance stays constant.
DECAY_MIN_PROPOSALS = 20
DECAY_MIN_ACCEPTED = 5
DECAY_MIN_STEPS = 5
DECAY_PERMUTATIONS = 199  # rearrangements of the iterations for the decay's p-value
CORRELATION_ALPHA = 0.05
CORRELATION_MIN_STEPS = 5  # iterations of two proposals or more the correlation test needs
SEED = 20260731  # fixed, so the same traces give the same p-value
RHO_MAX = 0.999
_CHUNK = 16  # rearranged data sets profiled at once (bounds the memory of the search)
NO_DECAY_TAU = 1e9  # proposals: a draw whose refitted decay rate is 0 (tau must be finite)


@dataclass(frozen=True)
class CorrelationFit:
    identified: bool  # some iteration judged two proposals or more
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
    decay_a0: float
    decay_tau: float  # proposals; inf when the MLE is no decay at all
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


def _decay_statistic(steps: Steps, passed: np.ndarray) -> np.ndarray:
    """Twice the log-likelihood gain of the best decay on the grid over constant (rate 0)."""
    _, ll = profile_a0(steps, passed, steps.rates())
    return 2 * (ll.max(axis=-1) - ll[..., 0])


def fit_decay(steps: Steps) -> tuple[float, float, float]:
    """(a0, rate per proposal, log-likelihood) of the decay's maximum-likelihood fit.

    The rate is at most 1 / tau_floor; 0 when the iterations hold one moment only.
    """
    if steps.until <= 0:
        a = steps.accepted / steps.proposals
        ll = bernoulli_log_likelihood(steps, steps.passed, np.full(len(steps.made), a))
        return a, 0.0, float(ll)
    grid = steps.rates()
    a, ll = profile_a0(steps, steps.passed, grid)
    best = int(np.argmax(ll))
    if best == 0:
        return float(a[0]), 0.0, float(ll[0])
    # Refine between the grid's neighbours of the best rate.
    low, high = grid[best - 1], grid[min(best + 1, len(grid) - 1)]

    def negative(rate: float) -> float:
        return -float(profile_a0(steps, steps.passed, np.array([rate]))[1][0])

    result = scipy.optimize.minimize_scalar(negative, bounds=(low, high), method="bounded")
    rate = float(result.x) if -result.fun > ll[best] else float(grid[best])
    a_at, ll_at = profile_a0(steps, steps.passed, np.array([rate]))
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


def fit_rho(steps: Steps, mean: np.ndarray) -> float:
    """rho's maximum-likelihood estimate given each iteration's mean (0 at the boundary)."""
    several = steps.judged >= 2
    if not several.any():
        return 0.0
    informative, m = steps.take(several), mean[several]
    result = scipy.optimize.minimize_scalar(
        lambda rho: -betabinomial_log_likelihood(informative, m, rho),
        bounds=(1e-6, RHO_MAX),
        method="bounded",
    )
    if -result.fun <= betabinomial_log_likelihood(informative, m, 0.0):
        return 0.0
    return float(result.x)


def fit_correlation(steps: Steps, mean: np.ndarray) -> CorrelationFit:
    several = steps.judged >= 2
    m = np.clip(mean, 0.0, 1.0)
    why_not = ""
    if not several.any() or np.all((m <= 0) | (m >= 1)):
        why_not = "not identifiable: no iteration judged two proposals or more; kept 0"
    elif several.sum() < CORRELATION_MIN_STEPS:
        why_not = (
            f"not testable: {several.sum()} iteration(s) judged two proposals or more "
            f"(needs {CORRELATION_MIN_STEPS}); kept 0"
        )
    if why_not:
        return CorrelationFit(False, 0.0, 0.0, 1.0, 0.0, why_not)
    rho = fit_rho(steps, mean)
    informative = steps.take(several)
    gain = betabinomial_log_likelihood(informative, mean[several], rho)
    gain -= betabinomial_log_likelihood(informative, mean[several], 0.0)
    statistic = max(0.0, 2 * gain)
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
    constant_ll = float(
        bernoulli_log_likelihood(steps, steps.passed, np.full(len(steps.made), rate0))
    )
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
        decay_a0=a0,
        decay_tau=tau,
        lr_statistic=statistic,
        lr_pvalue=pvalue,
        decay_until=steps.until,
        tau_floor=steps.tau_floor,
        correlation=correlation,
        batched=batched,
        chosen=chosen,
        reason=reason,
    )


def draw_acceptance(resample: Resample) -> dict[str, float]:
    """Acceptance refitted to a resample with the point estimate's model: decay or constant,
    the batched iterations' ratio if fitted, the correlation if kept."""
    steps, chosen = resample.units.steps, resample.scenario.acceptance
    if steps.proposals == 0:
        return {}
    rate = 0.0
    if chosen.tau is None:
        refitted = Acceptance(steps.accepted / steps.proposals)
    else:
        a0, rate, _ = fit_decay(steps)
        refitted = Acceptance(a0, 1 / rate if rate > 0 else NO_DECAY_TAU, chosen.decay_until)
    if chosen.batched != 1:
        if batched_unidentified(steps):  # this resample lost one kind: the point's ratio
            ratio = min(chosen.batched, 1 / refitted.a0)
            refitted = dataclasses.replace(refitted, batched=ratio)
        else:
            single, batched = split_a0(steps, rate)
            refitted = dataclasses.replace(refitted, a0=single, batched=batched / single)
    draw = {"acceptance.a0": refitted.a0}
    if refitted.tau is not None:
        draw["acceptance.tau"] = refitted.tau
    if refitted.batched != 1:
        draw["acceptance.batched"] = refitted.batched
    if chosen.correlation > 0:
        draw["acceptance.correlation"] = fit_rho(steps, step_means(steps, refitted))
    return draw


def acceptance_lines(cal: Calibration) -> list[str]:
    a = cal.acceptance
    c = a.correlation
    decay = f"decaying fit a0={a.decay_a0:.3f} tau={a.decay_tau:.4g} proposals"
    if math.isfinite(a.tau_floor):
        decay += f" (tau searched from {a.tau_floor:.4g})"
    if a.chosen.tau is not None:
        decay += f", held from {a.decay_until:g} proposals on (decay_until: the most the fit saw)"
    return [
        f"acceptance: {a.accepted}/{a.proposals} = {a.rate:.3f} over {a.steps} iterations "
        f"[Wilson 95% {a.wilson[0]:.3f}, {a.wilson[1]:.3f}]; {decay}; {a.reason}",
        f"  within-iteration correlation (beta-binomial): rho={c.rho:.3g}; {c.reason}"
        + (f" -> correlation={c.chosen:.3g}" if c.chosen else ""),
        batched_line(a.batched),
    ]


# ---- the batched iterations' ratio ----

RATIO_MIN_PROPOSALS = 10  # judged by single iterations, and by batched ones, to fit `batched`
RATIO_ALPHA = 0.05
# Where the traces cannot pin `batched`, draws take it from a lognormal prior with median 1,
# symmetric on the log scale: "unknown", not "lower" (docs/calibration.md says why this sd).
BATCHED_PRIOR_LOG_SD = 0.25
BATCHED_PRIOR_SEED = 20261204


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


def split_a0(steps: Steps, rate: float) -> tuple[float, float]:
    """a0's maximum-likelihood estimate on the single iterations and on the batched ones,
    at this decay rate per proposal (0: constant, and a0 is the share passed)."""
    a0 = []
    for rows in (~steps.batched, steps.batched):
        part = steps.take(rows)
        a0.append(float(profile_a0(part, part.passed, np.array([rate]))[0][0]))
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
    gain = betabinomial_log_likelihood(steps, step_means(steps, chosen), rho)
    gain -= betabinomial_log_likelihood(steps, step_means(steps, pooled), rho)
    statistic = max(0.0, 2 * gain)
    pvalue = float(scipy.stats.chi2.sf(statistic, df=1))
    words = f"LR={statistic:.2f}, p={pvalue:.2g}"
    verdict = (
        f"batched iterations differ ({words})"
        if pvalue < RATIO_ALPHA
        else f"the data do not tell it from 1 ({words}); the draws carry its uncertainty"
    )
    return dataclasses.replace(fit, lr_statistic=statistic, pvalue=pvalue, reason=verdict)


def batched_line(b: BatchedFit) -> str:
    if not b.identified:
        return f"  batched iterations: {b.reason}"
    (sa, sn), (ba, bn) = b.single, b.batched
    return (
        f"  batched iterations: {ba}/{bn} = {ba / bn:.3f} against single iterations' {sa}/{sn} = "
        f"{sa / sn:.3f}; ratio {b.ratio:.3g} [95% {b.interval[0]:.3g}, {b.interval[1]:.3g}]: "
        f"{b.reason} -> batched={b.ratio:.3g}"
    )
