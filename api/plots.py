"""Figures, drawn on matplotlib Figure objects: shown by a notebook, saved by the CLI.
What every figure shares, the predictions' figures (sweep, progress, learning curves),
and measured runs against them (`sweep_vs_measured.png`).

No pyplot: importing this module neither picks a backend nor keeps figures in
a global registry, so it changes nothing for a program that imports it. A
figure here is a `Picture`, which a notebook shows as an image by itself.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.sim.predict import Interval, Prediction

if TYPE_CHECKING:
    from pxn.checks.validate import ScenarioValidation
    from pxn.sim.curves import Curve


class Picture(Figure):
    """A Figure a notebook shows as a PNG, with no pyplot or inline backend to register it."""

    def _repr_png_(self) -> bytes:
        image = io.BytesIO()
        self.savefig(image, format="png", dpi=100)
        return image.getvalue()


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a person would read these durations in, and its size in seconds."""
    if seconds >= 2 * 3600:
        return "hours", 3600.0
    if seconds >= 2 * 60:
        return "minutes", 60.0
    return "seconds", 1.0


def draw_predictions(
    ax: Axes,
    predictions: Sequence[Prediction | None],
    size: float,
    labels: Sequence[str] | None = None,
) -> None:
    """One column per shape: the simulated mean and 5-95% band, and the closed form.

    A None column is a gap: lines and band break there (between setups).
    """
    x = range(len(predictions))

    def each(value: Callable[[Prediction], float]) -> list[float]:
        return [math.nan if p is None else value(p) / size for p in predictions]

    first = next(p for p in predictions if p is not None)
    ax.fill_between(
        x,
        each(lambda p: p.wall_clock.low),
        each(lambda p: p.wall_clock.high),
        color="tab:blue",
        alpha=0.2,
        label=f"simulated 5-95% ({first.replicates} replicates)",
    )
    ax.plot(x, each(lambda p: p.wall_clock.mean), "o-", color="tab:blue", label="simulated mean")
    ax.plot(
        x,
        each(lambda p: p.analytic.wall_clock),
        "s--",
        color="tab:orange",
        label="closed form (paper)",
    )
    if labels is None:
        labels = ["" if p is None else p.shape.label for p in predictions]
    ax.set_xticks(x, labels)
    ax.set_xlabel("shape (P parents x N proposals from each, per iteration)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)


def draw_speedup(
    ax: Axes, predictions: Sequence[Prediction | None], measured: Sequence[float] = ()
) -> list[Line2D]:
    """Speedup against single on a second axis; returns the legend entries it adds."""
    x = range(len(predictions))
    speed = ax.twinx()
    simulated = [
        math.nan if p is None or p.speedup is None else p.speedup.mean for p in predictions
    ]
    speed.plot(x, simulated, "^:", color="tab:green", alpha=0.9)
    handles = [
        Line2D([], [], marker="^", linestyle=":", color="tab:green", label="simulated speedup")
    ]
    if measured:
        speed.plot(x, measured, "v", color="darkgreen", markersize=8, fillstyle="none")
        handles.append(
            Line2D(
                [],
                [],
                marker="v",
                linestyle="",
                color="darkgreen",
                fillstyle="none",
                label="measured speedup (vs singles on the same W)",
            )
        )
    speed.set_ylabel("speedup vs single", color="tab:green")
    speed.tick_params(axis="y", colors="tab:green")
    speed.set_ylim(0, max(v for v in [*simulated, *measured] if not math.isnan(v)) * 1.25)
    return handles


def sweep_figure(scenario: Scenario, predictions: Sequence[Prediction]) -> Figure:
    """Predicted wall-clock per shape with its interval, the closed form, and speedup."""
    unit, size = time_unit(max(p.wall_clock.high for p in predictions))
    fig = Picture(figsize=(8, 5.4), layout="constrained")
    ax = fig.subplots()
    draw_predictions(ax, predictions, size)
    ax.axhline(
        predictions[0].analytic.bound / size,
        color="grey",
        linestyle=":",
        label="strong-scaling bound B·T_e/W",
    )
    ax.set_ylabel(f"predicted wall-clock ({unit})")
    handles, _ = ax.get_legend_handles_labels()
    handles += draw_speedup(ax, predictions)
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize="small")
    ax.set_title(
        f"{scenario.name}: B={scenario.budget}, V={scenario.valset_size}, "
        f"b={scenario.minibatch}, W={scenario.workers}"
    )
    return fig


BANDS = 3  # shapes whose bands a progress figure draws all of


def progress_figure(
    scenario: Scenario,
    predictions: Sequence[Prediction],
    measured: Sequence[tuple[str, RunSummary]] = (),
) -> Figure:
    """The best validation score against wall-clock per shape: the mean over replicates,
    with the 5-95% band of the first and the last shape (of every shape when there are
    at most BANDS: more overlap into one colour), and measured runs (label, summary)
    overlaid as steps."""
    unit, size = time_unit(max(p.progress.times[-1] for p in predictions if p.progress))
    fig = Picture(figsize=(8, 5.4), layout="constrained")
    ax = fig.subplots()
    colours = colormaps["tab10"]
    for i, p in enumerate(predictions):
        band = p.progress
        if band is None:
            continue
        times = [t / size for t in band.times]
        colour = colours(i % 10)
        if len(predictions) <= BANDS or i in (0, len(predictions) - 1):
            ax.fill_between(times, band.low, band.high, color=colour, alpha=0.15, linewidth=0)
        ax.plot(times, band.mean, color=colour, label=f"{p.shape.label} (predicted)")
    for label, run in measured:
        if run.progress:
            at, best = zip(*run.progress, strict=True)
            ax.step(
                [t / size for t in (*at, run.wall_clock)],
                [*best, best[-1]],
                where="post",
                color="black",
                linewidth=1,
                alpha=0.7,
            )
            ax.annotate(label, (run.wall_clock / size, best[-1]), fontsize="x-small")
    if measured:
        ax.plot([], [], color="black", linewidth=1, label="measured runs")
    ax.set_xlabel(f"wall-clock ({unit})")
    ax.set_ylabel("best mean validation score so far")
    ax.set_title(
        f"{scenario.name}: B={scenario.budget}, V={scenario.valset_size}, "
        f"b={scenario.minibatch}, W={scenario.workers}; bands: 5-95% of runs",
        fontsize="medium",
    )
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize="small")
    return fig


def curves_figure(
    scenario: Scenario,
    curves: Sequence[Curve],
    deadline: float | None = None,
    max_dollars: float | None = None,
) -> Figure:
    """Expected test score against dollars and against wall-clock, one line and 5-95% band
    per shape, a point per budget; DSPy's levels named, each knee ringed, the deadline and
    the cap drawn where given. Without prices, against wall-clock alone."""
    priced = scenario.prices is not None
    unit, size = time_unit(max(p.prediction.wall_clock.mean for c in curves for p in c.points))
    fig = Picture(figsize=(12, 5.2) if priced else (7.5, 5.2), layout="constrained")
    axes = fig.subplots(1, 2 if priced else 1, sharey=True, squeeze=False)[0]
    colours = colormaps["tab10"]
    panels: list[tuple[Axes, Callable[[Prediction], float], str]] = [
        (axes[-1], lambda p: p.wall_clock.mean / size, f"predicted wall-clock ({unit}, mean)")
    ]
    if priced:
        panels.insert(0, (axes[0], lambda p: p.dollars.mean, "predicted dollars (mean)"))
    for ax, x_of, label in panels:
        for i, curve in enumerate(curves):
            colour = colours(i % 10)
            xs = [x_of(point.prediction) for point in curve.points]
            scores = [point.prediction.test_score for point in curve.points]
            ax.fill_between(
                xs, [s.low for s in scores], [s.high for s in scores], color=colour, alpha=0.07
            )
            for edge in ([s.low for s in scores], [s.high for s in scores]):
                ax.plot(xs, edge, color=colour, linewidth=0.6, linestyle=":")
            ax.plot(xs, [s.mean for s in scores], "o-", color=colour, markersize=4,
                    label=curve.shape.label)  # fmt: skip
            for x, point in zip(xs, curve.points, strict=True):
                if point.given != str(point.budget):  # DSPy's level: named on the curve
                    y = point.prediction.test_score.mean
                    ax.annotate(point.given, (x, y), xytext=(4, -10), textcoords="offset points",
                                fontsize=7, color=colour)  # fmt: skip
            if curve.knee is not None:
                at = next(p for p in curve.points if p.budget == curve.knee.budget)
                ax.scatter(x_of(at.prediction), at.prediction.test_score.mean, s=110,
                           facecolors="none", edgecolors=colour, linewidths=1.5)  # fmt: skip
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("expected test score of the chosen candidate (mean, 5-95% band)")
    if deadline is not None:
        axes[-1].axvline(deadline / size, color="black", linestyle="--", linewidth=1,
                         label="deadline")  # fmt: skip
    if max_dollars is not None and priced:
        axes[0].axvline(max_dollars, color="dimgrey", linestyle="-.", linewidth=1,
                        label="dollar cap")  # fmt: skip
    axes[0].scatter([], [], s=110, facecolors="none", edgecolors="grey", label="knee")
    budgets = [p.budget for p in curves[0].points]
    fig.suptitle(
        f"{scenario.name}: learning curves\nB = {budgets[0]} to {budgets[-1]} metric calls "
        f"({len(budgets)} budgets), V={scenario.valset_size}, b={scenario.minibatch}, "
        f"W={scenario.workers}",
        fontsize="medium",
    )
    handles = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize="small")
    return fig


def error_bar(interval: Interval, size: float = 1.0) -> list[list[float]]:
    """matplotlib's [[below], [above]] for a 5-95% interval around its mean.

    A mean can lie outside its own 5-95% interval (a count that is 10 in 95%
    of replicates and 0 in the rest has its mean below the 5th percentile):
    that side's bar is then empty rather than negative.
    """
    return [
        [max(0.0, interval.mean - interval.low) / size],
        [max(0.0, interval.high - interval.mean) / size],
    ]


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save whole or not at all: render beside the target, then rename into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        fig.savefig(partial, dpi=120)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def measured_speedup_of(validation: ScenarioValidation, checks: list) -> float:
    """Mean wall-clock of the completed singles run on the same pool, over these runs' mean.

    Singles on another pool (another W) are no baseline: they ran at another speed.
    """

    done = [c for c in checks if c.complete]
    pools = {c.measured_setup["workers"] for c in done}
    singles = [
        c.wall_clock
        for c in validation.checks
        if c.shape.k == 1 and c.complete and c.measured_setup["workers"] in pools
    ]
    if not done or not singles:
        return float("nan")
    return float(np.mean(singles)) / float(np.mean([c.wall_clock for c in done]))


@dataclass(frozen=True)
class ShapeOnSetup:
    """One column of the predicted-vs-measured figure: a shape on one setup."""

    label: str
    checks: list  # the runs of this shape on this setup (calibrate.validate.Check)

    @property
    def predicted(self) -> Prediction:
        return self.checks[0].predicted  # the runs of one setup share their prediction


def validation_columns(validation: ScenarioValidation) -> list[ShapeOnSetup | None]:
    """Columns by setup (W, B), then shape; None between setups.

    Runs on different pools were predicted on their own setup each: one column
    per shape would put a W = 4 run beside a W = 1 band.
    """
    groups: dict[tuple[int, int], dict] = {}
    for check in validation.checks:
        setup = (check.measured_setup["workers"], check.measured_setup["budget"])
        groups.setdefault(setup, {}).setdefault(check.shape, []).append(check)
    several = len(groups) > 1
    columns: list[ShapeOnSetup | None] = []
    for (workers, _), by_shape in sorted(groups.items()):
        if columns:
            columns.append(None)
        for shape in sorted(by_shape, key=lambda s: (s.k, s.p)):
            label = f"{shape.label}\nW={workers}" if several else shape.label
            columns.append(ShapeOnSetup(label, by_shape[shape]))
    return columns


def sweep_vs_measured_figure(validation: ScenarioValidation) -> Figure:
    """Measured runs against the simulated mean and 5-95% band and the closed form.

    One column per shape and setup; every measured run is a point. The second
    axis is speedup against single: simulated, and measured when single was
    measured on the same W.
    """

    columns = validation_columns(validation)
    predicted = [None if c is None else c.predicted for c in columns]
    high = max(
        max(p.wall_clock.high for p in predicted if p is not None),
        max(c.wall_clock for c in validation.checks),
    )
    unit, size = time_unit(high)

    fig = Picture(figsize=(max(8.5, 0.75 * len(columns)), 5.6), layout="constrained")
    ax = fig.subplots()
    draw_predictions(ax, predicted, size, ["" if c is None else c.label for c in columns])
    for i, column in enumerate(columns):
        if column is None:
            continue
        checks = column.checks
        offsets = np.linspace(-0.08, 0.08, len(checks)) if len(checks) > 1 else [0.0]
        for offset, check in zip(offsets, checks, strict=True):
            ax.plot(
                i + offset,
                check.wall_clock / size,
                "D" if check.complete else "x",
                color="black",
                markersize=6,
            )
    # The axis was fixed before the runs were drawn: a run above every prediction is shown.
    ax.set_ylim(0, max(ax.get_ylim()[1], high / size * 1.05))
    ax.set_ylabel(f"wall-clock ({unit})")

    measured_speedup = [
        math.nan if c is None else measured_speedup_of(validation, c.checks) for c in columns
    ]
    if all(np.isnan(measured_speedup)):
        measured_speedup = []
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="D", color="black", linestyle="", label="measured run"))
    handles += draw_speedup(ax, predicted, measured_speedup)
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize="small")
    inside, counted = validation.coverage
    setups = {(c.measured_setup["workers"], c.measured_setup["budget"]) for c in validation.checks}
    setup = "setups differ by run" if len(setups) > 1 else "W={}, B={}".format(*setups.pop())
    ax.set_title(
        f"predicted vs measured: {validation.scenario.name}, {setup}\n"
        f"simulator MAPE {validation.sim_mape:.1%}, closed form {validation.analytic_mape:.1%}, "
        f"{inside}/{counted} runs inside the band",
        fontsize="medium",
    )
    return fig
