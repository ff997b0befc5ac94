"""The batched iterations' acceptance over the single ones' (`batched`): fitted where the
traces hold enough of both kinds, tested against one a0 for both, else drawn from its
prior (docs/calibration.md, "Acceptance").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.acceptance_likelihood import (
    Steps,
    betabinomial_log_likelihood,
    profile_a0,
    step_means,
)

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
