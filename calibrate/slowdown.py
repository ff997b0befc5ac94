"""The Scenario's load slowdown beta, fitted from the traces.

The simulator stretches a call that starts while m LM calls are served
(itself included) to 1 + beta (m - 1) times its drawn latency. In logs that
is a shift: log latency = c(kind) + log(1 + beta (m - 1)) + noise, with one
c for rollouts and one for reflections (they differ in length, not in the
servers and the CPU they share, so one beta serves both). beta is fitted by
least squares on the log latencies, profiled over c: a ratio of geometric
means, robust to the heavy tails of latencies, and free of their family.

Constant latency (beta = 0) is kept unless a likelihood-ratio test supports
the slowdown, as acceptance keeps a constant rate unless decay is supported.
The interval is the profile-likelihood one.

A call's m is its load from load_effect.call_loads. With lm_servers = K,
a call that started with more than K in flight may have waited for a server,
and its latency holds that wait (the simulator adds the queueing itself): such
calls are set aside, from this fit and from the latency fits. beta is
identified only where one kind of call ran at two loads or more; a single run
whose every stage fills the pool has one load per kind, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

ALPHA = 0.01  # a slowdown changes every prediction: it must be clearly supported
BETA_MAX = 20.0  # search range; a call 20 times slower per extra call is beyond any pool
CONFIDENCE = 0.95


@dataclass(frozen=True)
class SlowdownFit:
    n: int  # calls used (positive latency, not set aside)
    set_aside: int  # calls that started with more than lm_servers in flight
    loads: dict[str, dict[int, int]]  # kind -> load -> calls
    identified: bool  # some kind ran at two loads or more
    beta: float  # least-squares estimate (nan when not identified)
    interval: tuple[float, float]  # profile-likelihood 95% interval
    lr_statistic: float
    pvalue: float
    chosen: float  # the Scenario's load_slowdown
    reason: str

    def factor(self, load: np.ndarray) -> np.ndarray:
        """What the chosen slowdown multiplies a latency by at these loads."""
        return 1 + self.chosen * (np.asarray(load, dtype=float) - 1)


def _rss(beta: float, log_latency: np.ndarray, load: np.ndarray, kinds: np.ndarray) -> float:
    """Residual sum of squares of the log model with each kind's c at its best."""
    shifted = log_latency - np.log1p(beta * (load - 1))
    total = 0.0
    for kind in np.unique(kinds):
        part = shifted[kinds == kind]
        total += float(np.sum((part - part.mean()) ** 2))
    return total


def fit_slowdown(
    kinds: np.ndarray, loads: np.ndarray, latencies: np.ndarray, lm_servers: int | None
) -> SlowdownFit:
    """Fit beta to calls of each kind ("rollout", "reflection") at their loads."""
    kinds, loads = np.asarray(kinds), np.asarray(loads, dtype=float)
    latencies = np.asarray(latencies, dtype=float)
    queued = loads > lm_servers if lm_servers is not None else np.zeros(len(loads), bool)
    use = ~queued & np.isfinite(latencies) & (latencies > 0)
    kinds, loads, log_latency = kinds[use], loads[use], np.log(latencies[use])
    counts = {
        str(kind): {
            int(m): int(np.sum((kinds == kind) & (loads == m)))
            for m in np.unique(loads[kinds == kind])
        }
        for kind in np.unique(kinds)
    }
    identified = any(len(by_load) > 1 for by_load in counts.values())
    n, set_aside = int(use.sum()), int(queued.sum())
    if not identified:
        levels = "; ".join(
            f"{kind}s at load {', '.join(map(str, m))}" for kind, m in counts.items()
        )
        return SlowdownFit(
            n, set_aside, counts, False, math.nan, (math.nan, math.nan), 0.0, 1.0, 0.0,
            f"not identifiable: each kind of call ran at one load only ({levels}); kept 0",
        )  # fmt: skip

    def rss(beta: float) -> float:
        return _rss(beta, log_latency, loads, kinds)

    # beta may come out negative (calls faster under load: noise, or a warm cache);
    # the factor must stay positive at the highest load.
    low = -1 / (loads.max() - 1) + 1e-6
    best = scipy.optimize.minimize_scalar(rss, bounds=(low, BETA_MAX), method="bounded")
    beta, rss_min = float(best.x), float(best.fun)
    rss0 = rss(0.0)
    if rss0 < rss_min:  # the optimiser's tolerance: zero is the best it can do
        beta, rss_min = 0.0, rss0

    # Gaussian likelihood with unknown variance: 2 (ll1 - ll0) = n log(rss0 / rss1).
    def statistic(b: float) -> float:
        return n * math.log(max(rss(b), 1e-300) / max(rss_min, 1e-300))

    lr = max(0.0, statistic(0.0))
    pvalue = float(scipy.stats.chi2.sf(lr, df=1))
    limit = float(scipy.stats.chi2.ppf(CONFIDENCE, df=1))

    def edge(bound: float) -> float:
        if statistic(bound) <= limit:
            return bound  # the interval runs to the end of the range searched
        return float(scipy.optimize.brentq(lambda b: statistic(b) - limit, beta, bound))

    interval = (edge(low), edge(BETA_MAX))
    if beta > 0 and pvalue < ALPHA:
        chosen, reason = beta, f"slowdown supported (LR={lr:.2f}, p={pvalue:.2g})"
    else:
        chosen = 0.0
        reason = f"kept 0: slowdown not supported (LR={lr:.2f}, p={pvalue:.2g})"
    return SlowdownFit(n, set_aside, counts, True, beta, interval, lr, pvalue, chosen, reason)
