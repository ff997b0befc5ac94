"""How a measured figure is judged against its predicted replicates: the one interval
every prediction prints, a value's percentile among the replicates, the mean absolute
relative error, and the tests of whether intervals hold what they claim."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.stats

PERCENTILES = (5, 95)  # the interval every prediction prints
COVERAGE = (PERCENTILES[1] - PERCENTILES[0]) / 100  # the share of runs a right interval holds


def percentile(measured: float, predicted: Sequence[float]) -> float:
    """The share of predicted values below `measured`, ties counted half: uniform on 0..1
    over many runs when the predicted distribution is right."""
    values = np.asarray(predicted, dtype=float)
    below = np.count_nonzero(values < measured) + 0.5 * np.count_nonzero(values == measured)
    return float(below / len(values))


def mape(errors: Sequence[float]) -> float:
    """The mean absolute relative error (nan for none)."""
    return float(np.mean(np.abs(errors))) if len(errors) else math.nan


def z_test(difference: float, spread: float, alike: bool) -> tuple[float, float]:
    """z = difference / spread and its two-sided normal p; with no spread, z is 0 when the two
    are `alike`, else infinite (any other value is impossible)."""
    z = difference / spread if spread else 0.0 if alike else math.copysign(math.inf, difference)
    return z, float(2 * scipy.stats.norm.sf(abs(z)))


def p_uniform(percentiles: Sequence[float]) -> float:
    """Kolmogorov-Smirnov: whether the runs' percentiles are uniform, as right predictions'."""
    return float(scipy.stats.kstest(percentiles, "uniform").pvalue)


def p_coverage(
    inside: int, runs: int, alternative: Literal["two-sided", "less"] = "two-sided"
) -> float:
    """Exact binomial test of `inside` of `runs` against COVERAGE: "less" asks only whether
    the intervals are too narrow; "two-sided" whether they are too narrow or too wide."""
    return float(scipy.stats.binomtest(inside, runs, COVERAGE, alternative=alternative).pvalue)
