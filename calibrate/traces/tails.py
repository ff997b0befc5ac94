"""Bounded tails: latencies that pile up at a cap, and tries cut at a timeout.

Given the maximum M, the count within CAP_WINDOW of M is binomial at the share the best
family fitted to every latency (the pile included, so conservative) gives that window; a
pile of CAP_MIN_PILE at p < CAP_ALPHA in CAP_MIN_SAMPLE latencies or more is a cap. A
naturally bounded latency can read as one. Where the runner retried after timeouts the
cap is known: those tries are right-censored, the cap is their median duration and
cap_retries the most retries a finished call made. Piled-up latencies are censored at
the window's edge; the cap sits on latencies served alone, where the simulator applies
it (docs/calibration.md, "Caps").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

CAP_WINDOW = 0.02  # a pile is within 2% of the maximum
CAP_ALPHA = 1e-3  # every latency sample is screened: a cap must be clear
CAP_MIN_PILE = 5
CAP_MIN_SAMPLE = 20


@dataclass(frozen=True)
class TailFit:
    n: int  # latencies screened
    low: float  # the window's lower edge: latencies at or above it are censored there
    pvalue: float  # binomial test of the pile; nan when not tested
    timed_out: int  # tries the runner cut at a timeout and retried (Attempt events)
    cap: float | None
    cap_retries: int
    reason: str

    @property
    def capped(self) -> bool:
        return self.cap is not None


def no_tail(n: int, reason: str) -> TailFit:
    return TailFit(n, math.inf, math.nan, 0, None, 0, reason)


def detect_cap(
    observed: np.ndarray,
    uncapped: scipy.stats.rv_continuous | None,
    timed_out: np.ndarray,
    retries: tuple[int, ...],
) -> TailFit:
    """Screen one latency sample for a cap.

    `uncapped` is the best family fitted to the observed latencies (None when too
    few for one); `timed_out` the durations of tries cut at a timeout; `retries`
    per retried call, the retries it made after timeouts and then finished.
    """
    n = len(observed)
    if len(timed_out):
        cap = float(np.median(timed_out))
        reason = f"{len(timed_out)} tries timed out at {cap:.4g} and were retried"
        low, most = cap * (1 - CAP_WINDOW), max(retries, default=0)
        return TailFit(n, low, math.nan, len(timed_out), cap, most, reason)
    if uncapped is None or n < CAP_MIN_SAMPLE:
        return no_tail(n, f"not testable: {n} latencies (needs {CAP_MIN_SAMPLE} and a family fit)")
    maximum = float(observed.max())
    low = maximum * (1 - CAP_WINDOW)
    piled = int(np.sum(observed >= low))
    below_max = float(uncapped.cdf(maximum))
    share = (below_max - float(uncapped.cdf(low))) / below_max if below_max > 0 else 1.0
    expected = (n - 1) * share
    pvalue = float(scipy.stats.binom.sf(piled - 2, n - 1, share))
    found = piled >= CAP_MIN_PILE and pvalue < CAP_ALPHA
    words = (
        f"{piled} values within {CAP_WINDOW:.0%} of the maximum {maximum:.4g}, "
        f"{expected + 1:.2g} expected without a cap (binomial p={pvalue:.2g})"
    )
    if not found:
        return TailFit(n, math.inf, pvalue, 0, None, 0, f"no cap: {words}")
    cap = float(np.median(observed[observed >= low]))
    return TailFit(n, low, pvalue, 0, cap, 0, f"capped at {cap:.4g}: {words}")


def censor(
    observed: np.ndarray, timed_out: np.ndarray, low: float
) -> tuple[np.ndarray, np.ndarray]:
    """(uncensored latencies, right-censoring points): the pile at `low`, timeouts as they ran."""
    piled = observed >= low
    points = np.concatenate([np.full(int(piled.sum()), low), timed_out])
    return observed[~piled], points
