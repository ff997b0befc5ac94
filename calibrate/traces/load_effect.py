"""Do calls slow down when more of them share the machine?

A call's load is the most calls of its own model (itself included) in flight over its
first DISPATCH_WINDOW seconds: known before its duration, and robust to gepa's pool
dispatching a stage's calls milliseconds apart (the simulator starts them at once).
Untimed rollouts span their adapter call and are left out. The effect is declared when
latency's Spearman correlation with load exceeds MIN_RHO at p < ALPHA over at least
MIN_CALLS calls; otherwise it is only reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.stats

from pxn.calibrate.traces.overhead import in_flight, robust_slope
from pxn.trace import Reflection, Rollout
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration

ALPHA = 0.01
DISPATCH_WINDOW = 0.1  # seconds; measured dispatch spread of one stage is under 0.02 s
MIN_RHO = 0.2  # weaker than this is not worth a warning, however significant
MIN_CALLS = 20


@dataclass(frozen=True)
class LoadEffect:
    what: str  # "rollout" or "reflection"
    n: int
    spearman: float  # rank correlation of latency and load; nan without variation
    pvalue: float
    slope: float  # seconds of latency per extra call in flight (Theil-Sen)
    by_load: dict[int, tuple[int, float]]  # load -> (calls, mean latency in seconds)

    @property
    def significant(self) -> bool:
        return self.n >= MIN_CALLS and self.pvalue < ALPHA and self.spearman > MIN_RHO


def call_loads(calls: list[Rollout | Reflection]) -> np.ndarray:
    """Each call's load: the most LM calls in flight over its first DISPATCH_WINDOW seconds."""
    if not calls:
        return np.empty(0, dtype=int)
    starts = np.array([c.start for c in calls])
    ends = np.array([c.end for c in calls])
    order = np.argsort(starts, kind="stable")
    sorted_starts = starts[order]
    # In-flight only rises at a start, so the most over an interval is the most
    # at the starts inside it (the call's own start included).
    at_start = in_flight(starts, ends, sorted_starts)
    until = np.minimum(starts + DISPATCH_WINDOW, ends)
    first = np.searchsorted(sorted_starts, starts, side="left")
    last = np.maximum(np.searchsorted(sorted_starts, until, side="right"), first + 1)
    loads = [at_start[i:j].max() for i, j in zip(first, last, strict=True)]
    return np.maximum(np.array(loads), 1)  # itself, even when it took no time


def fit_load_effects(traces: list[Trace]) -> list[LoadEffect]:
    effects = []
    for what, kind in (("rollout", Rollout), ("reflection", Reflection)):
        runs = [[c for c in t.of(kind) if kind is Reflection or c.timed] for t in traces]
        load = np.concatenate([call_loads(calls) for calls in runs])
        latency = np.array([c.duration for calls in runs for c in calls])
        if len(load) < 3:
            continue
        rho = pvalue = slope = math.nan
        if np.ptp(load) > 0 and np.ptp(latency) > 0:
            result = scipy.stats.spearmanr(load, latency)
            rho, pvalue = float(result.statistic), float(result.pvalue)
            slope = robust_slope(latency, load.astype(float))
        by_load = {
            int(level): (int(np.sum(load == level)), float(latency[load == level].mean()))
            for level in np.unique(load)
        }
        effects.append(LoadEffect(what, len(load), rho, pvalue, slope, by_load))
    return effects


def load_effect_lines(cal: Calibration) -> list[str]:
    """Latency against the LM calls in flight at a call's start (plain correlation)."""
    lines = []
    for effect in cal.load_effects:
        if math.isnan(effect.spearman):
            continue
        levels = ", ".join(
            f"{load}: {mean:.3g} s (n={n})" for load, (n, mean) in effect.by_load.items()
        )
        lines.append(
            f"{effect.what} latency vs LM calls in flight at its start: Spearman "
            f"{effect.spearman:.2f} (p={effect.pvalue:.2g}), {effect.slope:+.3g} s per extra "
            f"call; mean by load {levels}"
        )
    return lines
