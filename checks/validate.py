"""Measured runs against what the simulator and the closed form predicted for them.

Each run is predicted at its own setup (docs/validation.md). If the model is right, the
runs' percentiles are uniform: 90% inside the 5-95%, mean 0.5; Honesty tests both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pxn.calibrate.traces.overhead import loop_end
from pxn.run_summary import RunSummary, summarize
from pxn.scenario import Scenario
from pxn.setups import SetupGroup, by_setup, setup_of
from pxn.shape import Shape
from pxn.sim.predict import Prediction, predictions_of, simulate_shapes, total_replicates
from pxn.stats import COVERAGE, mape, p_coverage, percentile, z_test
from pxn.trace import Resume
from pxn.trace_reading import Loaded, load_traces

SIGNIFICANCE = 0.05  # of the tests that call intervals too narrow, too wide or biased


@dataclass(frozen=True)
class Check:
    """One measured run next to its predictions."""

    run: str  # the trace path
    status: str  # the run_end status, or "no run_end"
    resumed: bool
    shape: Shape
    measured_setup: dict[str, int]  # the run's budget, W, ...: what its prediction used
    measured: RunSummary  # as summarize() reads the trace
    wall_clock: float  # seconds to the end of gepa's loop: what the simulator models
    predicted: Prediction
    percentile: float  # among the predicted wall-clocks (stats.percentile)

    @property
    def after_loop(self) -> float:
        """Seconds between gepa's loop ending and run_end (the runner's own epilogue)."""
        return self.measured.wall_clock - self.wall_clock

    @property
    def complete(self) -> bool:
        return self.status == "completed"

    @property
    def sim_error(self) -> float:
        """Relative error of the simulated mean wall-clock: (predicted - measured) / measured."""
        return self.predicted.wall_clock.mean / self.wall_clock - 1

    @property
    def analytic_error(self) -> float:
        return self.predicted.analytic.wall_clock / self.wall_clock - 1

    @property
    def inside(self) -> bool:
        interval = self.predicted.wall_clock
        return interval.low <= self.wall_clock <= interval.high

    @property
    def score_inside(self) -> bool | None:
        """Whether the run's best validation score lies in the predicted 5-95% (None: the
        scenario has no quality model, or the run recorded no validation score)."""
        interval, best = self.predicted.best_score, self.measured.best_score
        if interval is None or best is None:
            return None
        return interval.low <= best <= interval.high


@dataclass(frozen=True)
class ScenarioValidation:
    """A scenario's predictions set beside measured runs: each run's check, and over the
    completed runs the errors, the coverage and whether the intervals are honest."""

    scenario: Scenario
    checks: list[Check]
    rejected: list[str]
    skipped_lines: list[str]
    replicates: int
    # Each run's simulated replicates, by its path: runs of one setup and shape share one list.
    simulated: dict[str, list[RunSummary]] = field(default_factory=dict, repr=False)

    @property
    def counted(self) -> list[Check]:
        """Completed runs: an interrupted run's wall-clock is not a full run's."""
        return [c for c in self.checks if c.complete]

    @property
    def sim_mape(self) -> float:
        return mape([c.sim_error for c in self.counted])

    @property
    def analytic_mape(self) -> float:
        return mape([c.analytic_error for c in self.counted])

    @property
    def coverage(self) -> tuple[int, int]:
        return sum(c.inside for c in self.counted), len(self.counted)

    @property
    def honesty(self) -> Honesty:
        return Honesty.of([c.percentile for c in self.counted], self.coverage[0])

    @property
    def score_coverage(self) -> tuple[int, int] | None:
        """Completed runs whose best validation score lies in its predicted 5-95%, of those
        with a score and a prediction of it (None: none has)."""
        judged = [c.score_inside for c in self.counted if c.score_inside is not None]
        return (sum(judged), len(judged)) if judged else None

    @property
    def score_error(self) -> float:
        """The mean absolute error of the predicted mean best score, in score units."""
        errors = [
            abs(c.predicted.best_score.mean - c.measured.best_score)
            for c in self.counted
            if c.score_inside is not None
        ]
        return float(np.mean(errors)) if errors else math.nan

    @property
    def acceptance(self) -> AcceptanceCheck | None:
        """The completed runs' accepted proposals against their predictions' rate."""
        return AcceptanceCheck.of(self.counted)


@dataclass(frozen=True)
class AcceptanceCheck:
    """Accepted proposals measured against the predictions' own rate, run by run: a run
    accepting fewer validates less and reflects more, whatever the latencies.

    `expected` applies each run's simulated accepted-per-proposal to the proposals it made;
    `z` is the difference in binomial standard errors (proposals taken as independent).
    """

    proposals: int
    accepted: int
    expected: float
    z: float
    p_value: float
    verdict: str

    @classmethod
    def of(cls, checks: Sequence[Check]) -> AcceptanceCheck | None:
        judged = [c for c in checks if c.measured.proposals and c.predicted.proposals.mean]
        if not judged:
            return None
        rates = [c.predicted.accepted.mean / c.predicted.proposals.mean for c in judged]
        made = [c.measured.proposals for c in judged]
        proposals, accepted = sum(made), sum(c.measured.accepted for c in judged)
        expected = sum(n * a for n, a in zip(made, rates, strict=True))
        spread = math.sqrt(sum(n * a * (1 - a) for n, a in zip(made, rates, strict=True)))
        # Every rate 0 or 1 leaves no spread: any other count is impossible at them.
        z, p_value = z_test(accepted - expected, spread, math.isclose(accepted, expected))
        told = (
            f"the runs accepted {accepted} of {proposals} proposals ({accepted / proposals:.1%}), "
            f"their predictions expected {expected / proposals:.1%}"
        )
        if p_value < SIGNIFICANCE:
            apart = "impossibly" if math.isinf(z) else f"{abs(z):.1f} binomial standard errors"
            verdict = (
                f"{told}: {apart} {'fewer' if z < 0 else 'more'}. "
                "The predictions assume the scenario's acceptance: their iterations and full "
                "validations, and so their wall-clock, are off with it (calibrate from runs "
                "of the shapes you predict, or check one)"
            )
        else:
            verdict = f"{told}, consistent (p = {p_value:.2g})"
        return cls(proposals, accepted, expected, z, p_value, verdict)


@dataclass(frozen=True)
class Honesty:
    """Whether the completed runs bear the predicted intervals out (None: no run to tell)."""

    runs: int
    inside: int  # runs inside their 5-95% interval
    expected_inside: float  # 90% of the runs
    coverage_p: float | None  # two-sided exact binomial test of `inside` against 90%
    mean_percentile: float | None  # 0.5 when unbiased; above: runs took longer than predicted
    bias_p: float | None  # two-sided test of the mean percentile against 0.5
    too_narrow: bool  # fewer inside than 90%, at the 5% level
    too_wide: bool  # more inside than 90%, at the 5% level
    biased: str | None  # "slower" or "faster" than predicted, at the 5% level; None: neither
    verdict: str  # the above in a sentence

    @classmethod
    def of(cls, percentiles: Sequence[float], inside: int) -> Honesty:
        runs, expected = len(percentiles), COVERAGE * len(percentiles)
        if not runs:
            return cls(0, 0, 0.0, None, None, None, False, False, None,
                       "no completed run to judge the intervals by")  # fmt: skip
        coverage_p = p_coverage(inside, runs)
        mean = float(np.mean(percentiles))
        # The mean of n uniform percentiles has standard deviation 1 / sqrt(12 n), z's unit.
        _, bias_p = z_test((mean - 0.5) * math.sqrt(12 * runs), 1.0, alike=mean == 0.5)
        off = coverage_p < SIGNIFICANCE
        biased = ("slower" if mean > 0.5 else "faster") if bias_p < SIGNIFICANCE else None
        told = f"{inside}/{runs} runs inside the 5-95% interval ({expected:.1f} expected)"
        told += f", mean percentile {mean:.2f} (0.5 expected)"
        findings = []
        if off:
            findings.append("too narrow" if inside < expected else "too wide")
        if biased:
            findings.append(f"runs {biased} than predicted")
        if findings:
            verdict = f"intervals not honest: {' and '.join(findings)}: {told}"
        else:
            verdict = f"consistent with honest intervals: {told}"
            if runs < 10:
                verdict += f"; {runs} run(s) can reveal only gross errors"
        return cls(
            runs=runs,
            inside=inside,
            expected_inside=expected,
            coverage_p=coverage_p,
            mean_percentile=mean,
            bias_p=bias_p,
            too_narrow=off and inside < expected,
            too_wide=off and inside > expected,
            biased=biased,
            verdict=verdict,
        )


@dataclass(frozen=True)
class ValidationPlan:
    """The runs read and grouped by setup, and the replicates predicting them will take."""

    scenario: Scenario
    loaded: Loaded
    groups: list[SetupGroup]
    replicates: int  # per shape

    @property
    def total_replicates(self) -> int:
        return sum(total_replicates(s, shapes, self.replicates) for s, shapes, _ in self.groups)


def plan_validation(
    scenario: Scenario, paths: Sequence[str | Path] | Loaded, replicates: int = 200
) -> ValidationPlan:
    """Read the runs (unless read already); runs sharing a setup share one sweep over their
    shapes."""
    loaded = paths if isinstance(paths, Loaded) else load_traces(paths)
    return ValidationPlan(scenario, loaded, by_setup(scenario, loaded.traces), replicates)


def validate_runs(
    scenario: Scenario, paths: Sequence[str | Path], replicates: int = 200, jobs: int = 1
) -> ScenarioValidation:
    """Predict every run's own setup and set the prediction beside the measurement."""
    return validate_planned(plan_validation(scenario, paths, replicates), jobs)


def validate_planned(
    plan: ValidationPlan, jobs: int = 1, on_progress: Callable[[int], None] | None = None
) -> ScenarioValidation:
    """The plan's predictions, each beside its measured run (`on_progress(n)` is told as
    each n replicates finish)."""
    loaded, replicates = plan.loaded, plan.replicates
    checks: list[Check] = []
    simulated: dict[str, list[RunSummary]] = {}
    for the_scenario, shapes, traces in plan.groups:
        runs = simulate_shapes(the_scenario, shapes, replicates, jobs, on_progress)
        predictions = dict(zip(shapes, predictions_of(the_scenario, shapes, runs), strict=True))
        for trace in traces:
            shape = Shape.parse(trace.run_start.shape)
            end = trace.run_end
            wall_clock = loop_end(trace)
            simulated[str(trace.path)] = runs[shape]
            checks.append(
                Check(
                    run=str(trace.path),
                    status="no run_end" if end is None else end.status,
                    resumed=bool(trace.of(Resume)),
                    shape=shape,
                    measured_setup=setup_of(trace),
                    measured=summarize(trace),
                    wall_clock=wall_clock,
                    predicted=predictions[shape],
                    percentile=percentile(wall_clock, [r.wall_clock for r in runs[shape]]),
                )
            )
    order = {str(t.path): i for i, t in enumerate(loaded.traces)}
    checks.sort(key=lambda c: order[c.run])
    return ScenarioValidation(
        plan.scenario, checks, loaded.rejected, loaded.skipped_lines, replicates, simulated
    )
