"""Conformance: does the simulator still describe the installed gepa engine?

Real gepa runs on synthetic work (synthetic.py) beside the simulator's distribution for
the same scenario and setup (docs/validation.md). A (shape, W) group is flagged when its
percentiles are not plausibly uniform (Kolmogorov-Smirnov) or too few lie inside the
5-95% (one-sided binomial against 90%), each at ALPHA / (2 x groups); the whole set
conforms when no group is flagged and neither test rejects over all runs at ALPHA / 2.
MAPE is reported, not tested: one run's distance from the mean is mostly its own luck.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.overhead import fit_overhead
from pxn.checks.validate import Check, plan_validation, validate_planned
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.quality import Quality
from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.schedule import makespan
from pxn.stats import mape, p_coverage, p_uniform
from pxn.trace import Decision, Reflection, Rollout, Stage
from pxn.trace_reading import Loaded, Trace, load_traces

ALPHA = 0.01

# A workload of the size real gepa runs take: rollouts of about 2 s, reflections of about
# 9 s, 30% accepted; the trainset holds the widest default iteration's minibatches (8x2 at
# b = 3) without wrapping, and the budget gives the widest shape a few iterations.
DEFAULT_SCENARIO = Scenario(
    name="conformance",
    description="the default workload of `pxn conformance`",
    budget=400,
    valset_size=10,
    trainset_size=48,
    workers=4,
    minibatch=3,
    reflection_concurrency=10,
    rollout=Distribution("lognorm", {"s": 0.5, "scale": 2.0}),
    reflection=Distribution("lognorm", {"s": 0.4, "scale": 8.0}),
    acceptance=Acceptance(0.3),
).validate()

# `--task quality`: the same latencies and data with a quality model instead of rates: a
# binary metric (so perfect parents are skipped), V = 20, a budget giving single about 50
# iterations.
DEFAULT_QUALITY_SCENARIO = DEFAULT_SCENARIO.replace(
    name="conformance-quality",
    description="the quality task's default workload of `pxn conformance --task quality`",
    budget=500,
    valset_size=20,
    acceptance=None,
    quality=Quality(
        seed_score=0.3, change_mean=0.1, change_sd=0.4, ceiling=0.8, inherit=0.8, eval_noise=0.3
    ),
)


def scaled(distribution: Distribution, factor: float) -> Distribution:
    """The distribution of `factor` times a draw: its scale, loc (an empirical one has none)
    and cap stretch together."""
    params = dict(distribution.params)
    params["scale"] = params.get("scale", 1.0) * factor
    if "loc" in params:
        params["loc"] *= factor
    cap = None if distribution.cap is None else distribution.cap * factor
    return dataclasses.replace(distribution, params=params, cap=cap)


def at_time_scale(scenario: Scenario, factor: float) -> Scenario:
    """What synthetic work realises of `scenario`, every latency times `factor`, without
    tokens, prices, parameter uncertainty and stage_overhead (synthetic.py says why)."""
    if not (isinstance(factor, int | float) and 0 < factor < math.inf):
        raise PxnError(f"must be a number > 0: got {factor!r}", subject="time scale")
    return dataclasses.replace(
        scenario,
        rollout=scaled(scenario.rollout, factor),
        rollout_phases={p: scaled(d, factor) for p, d in scenario.rollout_phases.items()},
        reflection=scaled(scenario.reflection, factor),
        stage_overhead=0.0,
        tokens=None,
        prices=None,
        uncertainty=None,
    ).validate()


@dataclass(frozen=True)
class RunConformance:
    check: Check  # the run beside its prediction (validate.py)
    trace_check: str  # "ok", or how the trace disagreed with gepa's counts
    # The simulated replicates of its setup (shared by the runs of one setup).
    simulated: list[RunSummary] = field(default_factory=list, repr=False)

    @property
    def percentile(self) -> float:
        """The share of simulated wall-clocks below the measured one."""
        return self.check.percentile


class ConformingRuns:
    """What some runs (all of them, or a group's) say of the simulator."""

    runs: list[RunConformance]

    @property
    def inside(self) -> int:
        return sum(r.check.inside for r in self.runs)

    @property
    def sim_mape(self) -> float:
        return mape([r.check.sim_error for r in self.runs])

    @property
    def analytic_mape(self) -> float:
        return mape([r.check.analytic_error for r in self.runs])

    @property
    def mean_percentile(self) -> float:
        return float(np.mean([r.percentile for r in self.runs]))

    @property
    def p_uniform(self) -> float:
        """Kolmogorov-Smirnov: the percentiles are uniform."""
        return p_uniform([r.percentile for r in self.runs])

    @property
    def p_coverage(self) -> float:
        """One-sided binomial: as many inside as a right interval holds."""
        return p_coverage(self.inside, len(self.runs), "less")


@dataclass(frozen=True)
class Group(ConformingRuns):
    """The runs of one shape at one W."""

    shape: Shape
    workers: int
    runs: list[RunConformance]
    stage_overhead: float  # seconds per stage the engine added (engine_overhead), as simulated
    level: float  # each test's level: ALPHA / (2 x groups)

    @property
    def flagged(self) -> bool:
        return min(self.p_uniform, self.p_coverage) < self.level

    @property
    def where(self) -> str:
        """The group as the verdict names it, with which way it is off."""
        side = "slower" if self.mean_percentile > 0.5 else "faster"
        return (
            f"{self.shape.label} at W={self.workers} (gepa {side} than simulated: "
            f"{self.inside}/{len(self.runs)} inside, mean percentile {self.mean_percentile:.0%})"
        )


@dataclass(frozen=True)
class Conformance(ConformingRuns):
    scenario: Scenario  # the truth the synthetic work realised (overhead per group apart)
    runs: list[RunConformance]
    groups: list[Group]
    gepa_versions: list[str]
    replicates: int
    acceptance_measured: float  # accepted / judged proposals over all runs
    acceptance_simulated: float  # the same over the simulated replicates' means
    rejected: list[str]  # traces set aside, and why

    @property
    def mismatched(self) -> list[RunConformance]:
        return [r for r in self.runs if r.trace_check != "ok"]

    @property
    def conforms(self) -> bool:
        return (
            not self.mismatched
            and not any(g.flagged for g in self.groups)
            and min(self.p_uniform, self.p_coverage) >= ALPHA / 2
        )

    @property
    def verdict(self) -> str:
        """The answer in words: conforms or not, and where."""
        engine = f"gepa {', '.join(self.gepa_versions)}"
        summary = (
            f"{self.inside}/{len(self.runs)} runs inside the simulated 5-95% interval, "
            f"percentiles uniform p = {self.p_uniform:.2g}; simulator MAPE "
            f"{self.sim_mape:.1%}, closed form {self.analytic_mape:.1%}"
        )
        if self.conforms:
            return f"{engine} conforms: the simulator describes its runs ({summary})."
        reasons = []
        if self.mismatched:
            reasons.append(
                f"the traces of {len(self.mismatched)} run(s) disagree with gepa's own counts"
            )
        flagged = [g.where for g in self.groups if g.flagged]
        if flagged:
            reasons.append("off at " + "; ".join(flagged))
        if not flagged and min(self.p_uniform, self.p_coverage) < ALPHA / 2:
            side = "slower" if self.mean_percentile > 0.5 else "faster"
            reasons.append(f"over all runs gepa is {side} than simulated")
        return f"{engine} does NOT conform: {', and '.join(reasons)} ({summary})."


def dispatch(trace: Trace) -> float:
    """Seconds the stages lasted beyond the list schedule of their own calls on their slots
    (W for rollouts, C for reflections), taken in the order they started."""
    start = trace.run_start
    calls: dict[tuple[int, str], list[Rollout | Reflection]] = defaultdict(list)
    for rollout in trace.live(Rollout):
        calls[rollout.iteration, rollout.phase].append(rollout)
    for reflection in trace.live(Reflection):
        calls[reflection.iteration, "reflection"].append(reflection)
    beyond = 0.0
    for stage in trace.live(Stage):
        ran = sorted(calls[stage.iteration, stage.name], key=lambda call: call.start)
        slots = start.reflection_concurrency if stage.name == "reflection" else start.workers
        beyond += stage.duration - makespan([call.duration for call in ran], slots)
    return beyond


def engine_overhead(traces: Sequence[Trace]) -> float:
    """Seconds per stage the engine adds to the calls' own: gepa's work between stages
    and the dispatch of calls inside them."""
    between = fit_overhead(list(traces))
    inside = sum(dispatch(trace) for trace in traces)
    return max(0.0, (between.total + inside) / between.stages) if between.stages else 0.0


def judge(
    scenario: Scenario,
    paths: Sequence[str | Path],
    replicates: int = 200,
    jobs: int = 1,
    trace_checks: dict[str, str] | None = None,
) -> Conformance:
    """Each run (a trace of synthetic work realising `scenario`) against the simulator.

    `trace_checks` maps a trace's path to the runner's check of it against gepa's
    own counts ("ok" or the mismatch); a run not in it is taken as checked.
    """
    loaded = load_traces(paths)
    by_group: dict[tuple[Shape, int], list[Trace]] = defaultdict(list)
    for trace in loaded.traces:
        start = trace.run_start
        by_group[Shape.parse(start.shape), start.workers].append(trace)
    overhead = {group: engine_overhead(traces) for group, traces in by_group.items()}

    members: dict[tuple[Shape, int], list[RunConformance]] = {}  # a group's completed runs
    rejected = list(loaded.rejected)
    for group, traces in by_group.items():
        with_overhead = scenario.replace(stage_overhead=overhead[group])
        plan = plan_validation(with_overhead, Loaded(traces), replicates)
        validation = validate_planned(plan, jobs)
        rejected += [f"{c.run}: {c.status}, not a whole run" for c in validation.checks
                     if not c.complete]  # fmt: skip
        for check in validation.counted:
            checked = (trace_checks or {}).get(check.run, "ok")
            run = RunConformance(check, checked, validation.simulated[check.run])
            members.setdefault(group, []).append(run)
    if not members:
        raise PxnError("none of the runs completed: there is nothing to judge")
    runs = [run for its_runs in members.values() for run in its_runs]
    # Each group is tested on its own (Bonferroni over the groups).
    level = ALPHA / (2 * len(members))
    counted = [t for t in loaded.traces if str(t.path) in {r.check.run for r in runs}]
    decisions = [d for trace in counted for d in trace.live(Decision)]
    return Conformance(
        scenario=scenario,
        runs=runs,
        groups=[
            Group(shape, workers, its_runs, overhead[shape, workers], level)
            for (shape, workers), its_runs in sorted(members.items())
        ],
        gepa_versions=sorted({str(t.run_start.meta.get("gepa", "unknown")) for t in counted}),
        replicates=replicates,
        acceptance_measured=(
            sum(d.accepted for d in decisions) / len(decisions) if decisions else math.nan
        ),
        acceptance_simulated=(
            sum(r.check.predicted.accepted.mean for r in runs)
            / sum(r.check.predicted.proposals.mean for r in runs)
        ),
        rejected=rejected,
    )
