"""Learning curves: what each budget buys, per shape, and where buying more stops paying.

A curve is one shape's predictions at several budgets, each replicate one
run to the largest budget read at every smaller one (model.simulate_budgets),
so the gain of a budget over the previous one is paired: replicate r's test
score at one less its score at the other, the spread of what a run gains.

The knee is the first budget B whose double's expected test score (read off
the curve, linear in log2 B between the budgets asked) is less than the
run-to-run noise of that score above its own (its standard deviation at B,
within a parameter draw where the draws ran twice or more): past it, two runs
at one budget differ by more than doubling the budget moves their mean.
Without a quality model there is no score, and no knee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.predict import SINGLE, Interval, Prediction, simulate_shapes, summarize_replicates


@dataclass(frozen=True)
class CurvePoint:
    """One shape at one budget."""

    budget: int
    given: str  # the budget as given: "2000", "auto:light"
    prediction: Prediction
    # Over the previous budget, replicate by replicate (None: the first budget, or no
    # quality model): what the chosen candidate's test score and the best validation
    # score gained.
    test_gain: Interval | None = None
    best_gain: Interval | None = None
    test_noise: float | None = None  # the test score's standard deviation over replicates


@dataclass(frozen=True)
class Knee:
    """The budget past which doubling adds less than the noise, and what a run to it costs."""

    budget: int
    given: str
    gain_per_doubling: float  # of the expected test score, from this budget to the next
    noise: float  # the test score's run-to-run standard deviation at this budget
    wall_clock: Interval
    dollars: Interval | None


@dataclass(frozen=True)
class Curve:
    shape: Shape
    points: tuple[CurvePoint, ...]  # smallest budget first
    knee: Knee | None  # None: doubling still pays at the last budget, or no scores

    @property
    def last(self) -> CurvePoint:
        return self.points[-1]


def noise_of(values: Sequence[float], draws: int) -> float:
    """The run-to-run standard deviation of `values` (replicate r's at index r, run with
    parameter draw r mod `draws`): pooled within each draw where a draw ran twice or more,
    so the parameters' uncertainty is left out; over all replicates otherwise."""
    y = np.asarray(values, dtype=float)
    if draws == 0 or len(y) <= draws:
        return float(np.std(y, ddof=1))
    groups = [y[i::draws] for i in range(draws)]
    within = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups)
    return math.sqrt(within / (len(y) - len(groups)))


def paired_gain(runs: Sequence[RunSummary], before: Sequence[RunSummary], field: str) -> Interval:
    """Replicate r's figure in `runs` less its figure in `before` (the same run, shorter)."""
    return Interval.of(
        [getattr(a, field) - getattr(b, field) for a, b in zip(runs, before, strict=True)]
    )


def curve_of(
    scenarios: dict[int, Scenario],
    names: dict[int, str],
    shape: Shape,
    runs: Sequence[tuple[RunSummary, ...]],
    single: Sequence[tuple[RunSummary, ...]] | None,
) -> Curve:
    """The shape's curve from its replicates (each a summary per budget, in the order of
    `scenarios`: the scenario at each budget), speed-ups against `single`'s."""
    budgets = list(scenarios)
    scored = scenarios[budgets[0]].quality is not None
    points: list[CurvePoint] = []
    for i, budget in enumerate(budgets):
        at = [r[i] for r in runs]
        baseline = None if single is None else [r[i] for r in single]
        prediction = summarize_replicates(scenarios[budget], shape, at, baseline)
        gains = {}
        if scored and i > 0:
            before = [r[i - 1] for r in runs]
            gains = {
                "test_gain": paired_gain(at, before, "test_score"),
                "best_gain": paired_gain(at, before, "best_score"),
            }
        noise = noise_of([r.test_score for r in at], prediction.draws) if scored else None
        points.append(CurvePoint(budget, names[budget], prediction, test_noise=noise, **gains))
    return Curve(shape, tuple(points), knee_of(points) if scored else None)


def doubling_gains(points: Sequence[CurvePoint]) -> list[tuple[CurvePoint, float]]:
    """Each budget B whose double the curve reaches, with what doubling it adds to the
    expected test score: the mean at 2B read off the curve (linear in log2 B between the
    budgets asked), less the mean at B. Near budgets (a DSPy level beside a round number)
    then weigh as the doubling they are part of, not as a doubling of their own."""
    budgets = [p.budget for p in points]
    where = np.log2(budgets)
    means = [p.prediction.test_score.mean for p in points]
    return [
        (p, float(np.interp(math.log2(2 * p.budget), where, means)) - p.prediction.test_score.mean)
        for p in points
        if 2 * p.budget <= budgets[-1]
    ]


def knee_of(points: Sequence[CurvePoint]) -> Knee | None:
    """The first budget at which doubling adds less than its run-to-run noise."""
    for point, gain in doubling_gains(points):
        assert point.test_noise is not None
        if gain < point.test_noise:
            p = point.prediction
            return Knee(point.budget, point.given, gain, point.test_noise, p.wall_clock, p.dollars)
    return None


def sweep_curves(
    scenario: Scenario,
    shapes: Sequence[Shape],
    replicates: int,
    names: dict[int, str],
    **spread: Any,
) -> list[Curve]:
    """Every shape's curve over the budgets of `names` ({B: as given}), one run a replicate
    to the largest (the scenario's budget is replaced by it); spread as predict.sweep
    takes it (`jobs`, `backend`, `on_progress`)."""
    budgets = sorted(names)
    scenarios = {budget: scenario.replace(budget=budget) for budget in budgets}
    longest = scenarios[budgets[-1]]
    runs = simulate_shapes(longest, shapes, replicates, budgets=budgets, **spread)
    return [curve_of(scenarios, names, s, runs[s], runs[SINGLE]) for s in shapes]
