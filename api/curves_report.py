"""Learning curves as a person reads them and as a program does: a row per shape and
budget (scores, their paired gain over the previous budget, wall-clock, dollars), the
knee in words, and the same as CSV and JSON.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pxn.api.prediction_report import (
    extrapolation_warning,
    prediction_document,
    prediction_row,
)
from pxn.api.report import Note, Report, interval_columns
from pxn.api.tables import Column, Grid
from pxn.durations import format_duration, format_span
from pxn.scenario import Scenario
from pxn.sim.advise_ranking import score_text
from pxn.sim.curves import Curve, CurvePoint, Knee, doubling_gains
from pxn.sim.predict import Interval, Prediction


def gain_text(interval: Interval | None) -> str:
    """A paired gain as a person reads it: +0.012 [-0.020-+0.045]; "-" at the first budget."""
    if interval is None:
        return "-"
    return f"{interval.mean:+.3f} [{interval.low:+.2f}/{interval.high:+.2f}]"


def budget_text(point: CurvePoint | Knee) -> str:
    """A budget as given, with its metric calls where DSPy names it: 780 (auto:light)."""
    return point.given if point.given == str(point.budget) else f"{point.budget} ({point.given})"


def over_limits(p: Prediction, deadline: float | None, max_dollars: float | None) -> bool:
    """Whether the run's 95th percentile is past the deadline or the cap."""
    late = deadline is not None and p.wall_clock.high > deadline
    dear = max_dollars is not None and p.dollars is not None and p.dollars.high > max_dollars
    return late or dear


def knee_text(curve: Curve) -> str:
    """Where doubling the budget stops paying for this shape, and what a run to it costs."""
    shape = curve.shape.label
    knee = curve.knee
    if knee is None:
        gains = doubling_gains(curve.points)
        if not gains:
            return f"{shape}: the budgets asked span less than a doubling: no knee to name"
        point, gain = gains[-1]
        return (
            f"{shape}: no knee within the budgets asked: doubling B={point.budget} still adds "
            f"{gain:+.3f} to the expected test score, at least its run-to-run noise "
            f"(sd {point.test_noise:.3f})"
        )
    w = knee.wall_clock
    d = knee.dollars
    cost = "" if d is None else f" and costs ${d.mean:,.2f} [{d.low:,.2f}-{d.high:,.2f}]"
    return (
        f"{shape}: the knee is B={budget_text(knee)}: past it, doubling the budget adds "
        f"{knee.gain_per_doubling:+.3f} to the expected test score, less than its run-to-run "
        f"noise (sd {knee.noise:.3f}); a run to it takes {format_duration(w.mean)} "
        f"[{format_span(w.low, w.high)}]{cost}"
    )


def curves_table(
    scenario: Scenario, curves: list[Curve], deadline: float | None, max_dollars: float | None
) -> Grid:
    """A row per shape and budget: scores, their paired gain, wall-clock and dollars."""
    priced = scenario.prices is not None
    scored = scenario.quality is not None
    limited = deadline is not None or max_dollars is not None
    budgets = ", ".join(budget_text(p) for p in curves[0].points)
    caption = f"wall-clock{', dollars' if priced else ''}: simulated mean and 5-95%"
    if scored:
        caption += (
            "; test: the chosen candidate's expected score on fresh examples, best val: the "
            "best mean validation score, mean [5-95%]; gain: the test score over the previous "
            "budget's, run by run (one run read at both budgets), mean [5th/95th percentile]"
        )
    if limited:
        caption += "; over: the 95th percentile past the deadline or the cap"
    grid = Grid(
        title=(
            f"{scenario.name}: learning curves, B = {budgets} metric calls, V="
            f"{scenario.valset_size}, b={scenario.minibatch}, W={scenario.workers}, "
            f"{curves[0].last.prediction.replicates} replicates, one run each read at every B"
        ),
        columns=[
            *([Column("", left=True)] if limited else []),
            Column("shape", left=True),
            Column("budget", left=True),
            *(
                [
                    Column("test"),
                    Column("gain", words="test score gain"),
                    Column("best val", rank=2),
                ]
                if scored
                else []
            ),
            Column("wall-clock"),
            Column("5-95%", rank=1),
            *(
                [Column("dollars"), Column("$ 5-95%", rank=1, words="dollars 5-95%")]
                if priced
                else []
            ),
            Column("iterations", rank=2),
        ],
        caption=caption,
    )
    for curve in curves:
        for point in curve.points:
            p, d = point.prediction, point.prediction.dollars
            grid.add_row(
                *(["over" if over_limits(p, deadline, max_dollars) else ""] if limited else []),
                curve.shape.label,
                budget_text(point),
                *(
                    [score_text(p.test_score), gain_text(point.test_gain), score_text(p.best_score)]
                    if scored
                    else []
                ),
                format_duration(p.wall_clock.mean),
                format_span(p.wall_clock.low, p.wall_clock.high),
                *([f"${d.mean:,.2f}", f"{d.low:,.2f}-{d.high:,.2f}"] if priced else []),
                f"{p.iterations.mean:.1f}",
            )
    return grid


def curve_row(point: CurvePoint) -> dict[str, Any]:
    """One flat record per shape and budget: the columns of the curves' CSV."""
    row: dict[str, Any] = {"shape": point.prediction.shape.label, "budget": point.budget}
    row["budget_given"] = point.given
    row |= {k: v for k, v in prediction_row(point.prediction).items() if k != "shape"}
    row |= interval_columns("test_gain", point.test_gain)
    row |= interval_columns("best_gain", point.best_gain)
    row["test_score_sd"] = point.test_noise
    return row


def curves_report(
    scenario: Scenario,
    curves: list[Curve],
    deadline: float | None,
    max_dollars: float | None,
    notes: tuple[str, ...] = (),
) -> Report:
    """Each shape's learning curve in every form; the knee in words."""
    shown: list = [curves_table(scenario, curves, deadline, max_dollars)]
    if scenario.quality is not None:
        shown += [Note(knee_text(curve), label="knee") for curve in curves]
    else:
        shown.append(
            Note(
                "the scenario has no [quality] model: what each budget buys in score, and the "
                "knee, are not predicted; wall-clock and dollars are"
            )
        )
    predictions = [point.prediction for curve in curves for point in curve.points]
    shown += [
        Note(note) for note in (*notes, *dict.fromkeys(n for p in predictions for n in p.notes))
    ]
    warning = extrapolation_warning(scenario, [curve.last.prediction for curve in curves])
    if warning is not None:
        shown.append(warning)
    return Report(
        name="sweep",
        shown=shown,
        rows=[curve_row(point) for curve in curves for point in curve.points],
        document={
            "scenario": scenario.to_dict(),
            "budgets": {str(p.budget): p.given for p in curves[0].points},
            "deadline_s": deadline,
            "max_dollars": max_dollars,
            "curves": [curve_document(curve) for curve in curves],
            "notes": list(notes),
        },
    )


def curve_document(curve: Curve) -> dict[str, Any]:
    return {
        "shape": curve.shape.label,
        "knee": None if curve.knee is None else asdict(curve.knee),
        "points": [
            {
                "budget": point.budget,
                "budget_given": point.given,
                "test_gain": None if point.test_gain is None else asdict(point.test_gain),
                "best_gain": None if point.best_gain is None else asdict(point.best_gain),
                "test_score_sd": point.test_noise,
                "prediction": prediction_document(point.prediction),
            }
            for point in curve.points
        ],
    }
