"""Rollout phases: whether their latencies differ, and which get a latency of their own.

Each phase is fitted alone (in its own family, with the pooled cap). When a
Kruskal-Wallis test over the phases with PHASE_TEST_MIN rollouts gives p < PHASE_ALPHA,
each phase with PHASE_OWN_MIN rollouts gets its own [rollout.phases] latency and
[rollout] stays the pooled fit for the others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import scipy.stats

from pxn.calibrate.traces.fit import LatencyFit, describe_latency, fit_latency, refit_served
from pxn.calibrate.traces.slowdown import latency_sample
from pxn.calibrate.traces.units import Calls
from pxn.distribution import Distribution
from pxn.trace import ROLLOUT_PHASES

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

PHASE_TEST_MIN = 5  # points a phase needs to enter the test of phases differing
PHASE_ALPHA = 0.01
PHASE_OWN_MIN = 30  # points a phase needs for its own latency in the Scenario


@dataclass(frozen=True)
class PhaseFits:
    by_phase: dict[str, LatencyFit]
    pvalue: float  # Kruskal-Wallis across phases; nan when fewer than two phases
    own: dict[str, Distribution]  # [rollout.phases]: the phases with a latency of their own


def fit_phases(served: Calls, pooled: LatencyFit, choice: str, notes: list[str]) -> PhaseFits:
    by_phase = {}
    for phase in ROLLOUT_PHASES:
        observed, timed_out = latency_sample(served, "rollout", phase)
        if len(observed):
            by_phase[phase] = fit_latency(
                f"rollout {phase}",
                observed,
                choice if len(observed) >= PHASE_OWN_MIN else "auto",
                timed_out=timed_out,
                tail=pooled.tail,
            )
    pvalue = phase_test([f.samples for f in by_phase.values()])
    return PhaseFits(by_phase, pvalue, _own_phases(by_phase, pvalue, notes))


def _own_phases(
    by_phase: dict[str, LatencyFit], pvalue: float, notes: list[str]
) -> dict[str, Distribution]:
    """The phases that get their own latency: when phases differ, those with data enough."""
    if not pvalue < PHASE_ALPHA:
        return {}
    own = {p: f.chosen for p, f in by_phase.items() if f.n >= PHASE_OWN_MIN}
    medians = ", ".join(f"{p} {f.median:.3g} s" for p, f in by_phase.items())
    kept = ", ".join(own) if own else "none"
    notes.append(
        f"rollout latency differs by phase (Kruskal-Wallis p={pvalue:.2g}; medians {medians}): "
        f"phases with their own latency in [rollout.phases]: {kept} (at least "
        f"{PHASE_OWN_MIN} rollouts each); [rollout] stays the fit pooled over phases"
    )
    return own


def phase_test(samples: Sequence[Sequence[float]]) -> float:
    """Kruskal-Wallis p-value of the phases' latencies differing, over the phases with at
    least PHASE_TEST_MIN of them (its false-positive rate there is measured in the tests);
    nan when fewer than two phases have as many."""
    groups = [g for g in samples if len(g) >= PHASE_TEST_MIN]
    if len(groups) < 2:
        return math.nan
    try:
        return float(scipy.stats.kruskal(*groups).pvalue)
    except ValueError:  # every value identical
        return math.nan


def draw_rollout_phases(resample: Resample) -> dict[str, float]:
    """Each phase's own latency refitted to a resample."""
    cal, draw = resample.calibration, {}
    for phase, latency in cal.scenario.rollout_phases.items():
        draw |= refit_served(
            f"rollout.phases.{phase}", latency, resample.served, cal.rollout.tail, "rollout", phase
        )
    return draw


def phase_lines(cal: Calibration) -> list[str]:
    """The phases' own latencies: tested, and written when they differ."""
    if len(cal.rollout_by_phase) < 2:
        return []
    phases = ", ".join(
        f"{p} n={f.n} median {f.median:.3g} s" for p, f in cal.rollout_by_phase.items()
    )
    if math.isnan(cal.phase_pvalue):
        return [f"  by phase: {phases} (too few per phase to test whether they differ)"]
    test = f"Kruskal-Wallis p={cal.phase_pvalue:.2g}"
    own = cal.scenario.rollout_phases
    if not own:
        return [f"  by phase: {phases} ({test}: one distribution serves every phase)"]
    lines = [f"  by phase: {phases} ({test}: they differ; [rollout.phases] for {', '.join(own)})"]
    lines += [f"    {p}: {describe_latency(d)}" for p, d in own.items()]
    return lines
