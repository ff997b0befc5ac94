"""Measured runs against the simulated band and the closed form, shape by shape
(`sweep_vs_measured.png`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from pxn.api.plots import Picture, draw_predictions, draw_speedup, time_unit
from pxn.sim.predict import Prediction

if TYPE_CHECKING:
    from pxn.checks.validate import ScenarioValidation


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
