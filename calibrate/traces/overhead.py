"""What the stages do not explain: engine overhead, the concurrency reached, and whether
calls slow down when more of them share the machine.

Wall-clock minus the time inside stages, over the number of stages, is the
`stage_overhead` the simulator pays before each stage. The concurrency reached (the most
timed rollouts in flight against W, and the stages' busy share) says whether the pool
was used as the simulator assumes.

Load effect. A call's load is the most calls of its own model (itself included) in flight
over its first DISPATCH_WINDOW seconds: known before its duration, and robust to gepa's
pool dispatching a stage's calls milliseconds apart (the simulator starts them at once).
Untimed rollouts span their adapter call and are left out. The effect is declared when
latency's Spearman correlation with load exceeds MIN_RHO at p < ALPHA over at least
MIN_CALLS calls; otherwise it is only reported (the load slowdown is slowdown.py's).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.stats

from pxn.run_summary import summarize
from pxn.trace import ROLLOUT_PHASES, Iteration, Reflection, Rollout, Stage
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

TOLERANCE = 1e-9  # seconds
SUBSAMPLE = 2000  # pairs a Theil-Sen line weighs at most
ALPHA = 0.01
DISPATCH_WINDOW = 0.1  # seconds; measured dispatch spread of one stage is under 0.02 s
MIN_RHO = 0.2  # weaker than this is not worth a warning, however significant
MIN_CALLS = 20


@dataclass(frozen=True)
class OverheadFit:
    stages: int
    total: float  # seconds of gepa's loop outside every stage
    per_stage: float  # total / stages: the Scenario's stage_overhead
    gap_by_stage: dict[str, float]  # mean gap before each stage name, seconds
    after_loop: float  # seconds from the loop's end to run_end (e.g. a test-set evaluation)


def loop_end(trace: Trace) -> float:
    """When gepa's optimization loop ended: the last stage or iteration.

    The runner may do more before its run_end (score the best candidate on a
    test set); that is not part of the run the simulator models.
    """
    ends = [e.end for e in trace.events if isinstance(e, Stage | Iteration)]
    return max(ends) if ends else max(e.end for e in trace.events)


@dataclass(frozen=True)
class ConcurrencyFit:
    workers: int  # W, as the traces declare it
    peak: int  # most rollouts in flight at one instant
    busy_share: float  # rollout worker-seconds / (slots usable x stage seconds), rollout stages
    reflection_slots: int  # declared reflection concurrency
    reflection_peak: int


def fit_overhead(traces: list[Trace]) -> OverheadFit:
    gaps: dict[str, list[float]] = defaultdict(list)
    total, count, after = 0.0, 0, 0.0
    for trace in traces:
        stages = sorted(trace.of(Stage), key=lambda s: s.start)
        end = loop_end(trace)
        total += end - sum(s.duration for s in stages)
        after += max(0.0, summarize(trace).wall_clock - end)
        count += len(stages)
        previous = 0.0
        for stage in stages:
            gaps[stage.name].append(max(0.0, stage.start - previous))
            previous = stage.end
    return OverheadFit(
        stages=count,
        total=max(0.0, total),
        per_stage=max(0.0, total / count) if count else 0.0,
        gap_by_stage={name: float(np.mean(v)) for name, v in gaps.items()},
        after_loop=after,
    )


def in_flight(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many intervals [start, end) hold each instant in `at`."""
    # An end and the next start on the same slot are the same instant computed two
    # ways; the tolerance keeps float rounding from counting both calls at once.
    return np.searchsorted(np.sort(starts), at, side="right") - np.searchsorted(
        np.sort(ends), at + TOLERANCE, side="right"
    )


def _peak(calls: list[Rollout] | list[Reflection]) -> int:
    """The most calls in flight at one instant."""
    starts = np.array([c.start for c in calls])
    return int(in_flight(starts, np.array([c.end for c in calls]), starts).max()) if calls else 0


def _usable_slot_seconds(trace: Trace, rollouts: list[Rollout]) -> float:
    """Slot-seconds a stage could have used: min(W, its rollouts) x its length."""
    calls = Counter((r.iteration, r.phase) for r in rollouts)
    return sum(
        min(trace.run_start.workers, calls[s.iteration, s.name]) * s.duration
        for s in trace.of(Stage)
        if s.name in ROLLOUT_PHASES
    )


def subsample_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most SUBSAMPLE of the pairs, a fixed choice: Theil-Sen weighs every pair (n^2)."""
    if len(x) <= SUBSAMPLE:
        return x, y
    pick = np.random.default_rng(0).choice(len(x), size=SUBSAMPLE, replace=False)
    return x[pick], y[pick]


def fit_concurrency(traces: list[Trace]) -> ConcurrencyFit:
    peak = reflection_peak = 0
    busy = stage_seconds = 0.0
    workers = max(t.run_start.workers for t in traces)
    for trace in traces:
        rollouts = [r for r in trace.of(Rollout) if r.timed]
        peak = max(peak, _peak(rollouts))
        reflection_peak = max(reflection_peak, _peak(trace.of(Reflection)))
        busy += float(np.sum(np.array([r.duration for r in rollouts])))
        stage_seconds += _usable_slot_seconds(trace, rollouts)
    return ConcurrencyFit(
        workers=workers,
        peak=peak,
        busy_share=busy / stage_seconds if stage_seconds > 0 else float("nan"),
        reflection_slots=max(t.run_start.reflection_concurrency for t in traces),
        reflection_peak=reflection_peak,
    )


def draw_stage_overhead(resample: Resample) -> dict[str, float]:
    units = resample.units
    if units.stages.sum() > 0:
        return {"stage_overhead": float(units.gap.sum() / units.stages.sum())}
    return {}


def overhead_lines(cal: Calibration) -> list[str]:
    """The engine's overhead between stages, and the time after gepa's loop."""
    o = cal.overhead
    gaps = ", ".join(f"{name} {gap:.3g} s" for name, gap in o.gap_by_stage.items())
    lines = [
        f"engine overhead: {o.total:.4g} s outside {o.stages} stages -> "
        f"stage_overhead={o.per_stage:.4g} s (mean gap before: {gaps})"
    ]
    if o.after_loop > 0:
        lines.append(
            f"after gepa's loop: {o.after_loop:.4g} s before run_end in all (not gepa's loop, "
            "e.g. a test-set evaluation; left out of the scenario)"
        )
    return lines


def concurrency_lines(cal: Calibration) -> list[str]:
    """The rollouts and reflections seen in flight, and what dspy.GEPA's recordings imply."""
    c = cal.concurrency
    rollouts = (
        f"peak {c.peak} rollouts in flight of W={c.workers}; the workers busy "
        f"{c.busy_share:.0%} of their usable time in rollout stages"
        if c.peak
        else f"no rollout timed, so none seen in flight (W={c.workers})"
    )
    lines = [
        f"concurrency: {rollouts}; reflections peak {c.reflection_peak} of C={c.reflection_slots}"
    ]
    if cal.scenario.worker_split == "per_candidate":
        lines.append(
            "workers: recorded from dspy.GEPA, whose adapter splits its num_threads among a "
            "stage's candidates -> worker_split=per_candidate"
        )
    if cal.scenario.optimizer == "dspy.GEPA":
        lines.append(
            "reflections: recorded from dspy.GEPA, whose adapter proposes one text at a time, "
            "so reflections never overlap whatever P x N -> optimizer=dspy.GEPA, C=1"
        )
    return lines


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
            x, y = subsample_pairs(load.astype(float), latency)
            with np.errstate(invalid="ignore"):  # its interval, unused, is NaN for a tiny sample
                slope = float(scipy.stats.theilslopes(y, x).slope)
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
