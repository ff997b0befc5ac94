"""The search's conformance as a person reads it: a row per shape and figure, and notes.

A figure's measured mean, the simulated mean and 5-95% interval of one run,
their difference, how many runs fell inside and the shift test's p-value;
beneath, each group's pooled acceptance and how much of its runs' best score
over time lay inside the simulated band, and the verdict. Rows (for the CSV)
are per run: its figures and its percentiles among the replicates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pxn.api.report import Note, Report
from pxn.api.tables import Column, Grid
from pxn.calibrate.search_conformance import FigureCheck, SearchConformance

# How each figure is written: a share as a percentage, a count or a score as a number.
FORMATS = {
    "acceptance": "{:.1%}",
    "skipped_share": "{:.1%}",
    "iterations": "{:.1f}",
    "best_score": "{:.3f}",
    "test_score": "{:.3f}",
}
NAMES = {
    "acceptance": "acceptance",
    "skipped_share": "skipped share",
    "iterations": "iterations",
    "best_score": "best val score",
    "test_score": "test score",
}


def shown(check: FigureCheck, value: float) -> str:
    return FORMATS[check.figure].format(value)


def difference(check: FigureCheck) -> str:
    """Measured less simulated mean, in the figure's units (points for a share)."""
    diff = check.mean - check.simulated.mean
    if check.figure in ("acceptance", "skipped_share"):
        return f"{100 * diff:+.1f} pt"
    return f"{diff:+.3f}" if check.figure.endswith("score") else f"{diff:+.1f}"


def search_report(search: SearchConformance) -> Report:
    """The search's groups as a table, the pooled acceptance and progress beneath."""
    grid = Grid(
        title="gepa's search on the task of known quality vs the simulator",
        columns=[
            Column("shape", left=True),
            Column("W"),
            Column("figure", left=True),
            Column("measured", words="measured mean over the runs"),
            Column("simulated", words="simulated mean"),
            Column("sim 5-95%", words="simulated 5-95% interval of one run"),
            Column("diff", rank=1, words="measured less simulated mean"),
            Column("in", words="runs inside the simulated 5-95% interval"),
            Column("shift p", rank=1, words="Mann-Whitney p, runs against replicates"),
            Column("flag", left=True),
        ],
        caption=f"a flag: the shift or the coverage test rejects at {search.threshold:.2g} "
        "(0.01 over the shape-figure pairs and the two tests)",
    )
    for group in search.groups:
        for check in group.figures:
            interval = check.simulated
            grid.add_row(
                group.shape.label,
                str(group.workers),
                NAMES[check.figure],
                shown(check, check.mean),
                shown(check, interval.mean),
                f"{shown(check, interval.low)}-{shown(check, interval.high)}",
                difference(check),
                f"{check.inside}/{len(check.measured)}",
                f"{check.p_shift:.2g}",
                "OFF" if check.flagged else "",
            )
    pooled = "; ".join(
        f"{g.shape.label} {g.pooled.measured:.1%} vs {g.pooled.simulated:.1%} (p = "
        f"{g.pooled.p_value:.2g}{', OFF' if g.pooled_off else ''})"
        for g in search.groups
    )
    progress = "; ".join(
        f"{g.shape.label} {np.nanmean(g.progress_inside):.0%}" for g in search.groups
    )
    notes = [
        Note(search.verdict, label="search verdict"),
        Note(
            f"accepted / proposed over each shape's runs, measured vs simulated: {pooled}",
            label="pooled acceptance",
        ),
        Note(
            "share of the time a run's best validation score so far lay inside the simulated "
            f"5-95% band (mean over the runs; 90% expected, not tested): {progress}",
            label="best score over time",
        ),
    ]
    return Report(
        name="conformance",
        shown=[grid, *notes],
        # Iterations are the time check's row's already (measured_iterations).
        rows=[
            {"run": run} | {name: value for name, value in figures.items() if name != "iterations"}
            for run, figures in search.run_figures.items()
        ],
        document=search_document(search),
    )


def search_document(search: SearchConformance) -> dict[str, Any]:
    return {
        "conforms": search.conforms,
        "verdict": search.verdict,
        "threshold": search.threshold,
        "groups": [
            {
                "shape": g.shape.label,
                "workers": g.workers,
                "runs": len(g.runs),
                "figures": [
                    {
                        "figure": f.figure,
                        "measured_mean": f.mean,
                        "simulated_mean": f.simulated.mean,
                        "simulated_p5": f.simulated.low,
                        "simulated_p95": f.simulated.high,
                        "inside": f.inside,
                        "counted": len(f.measured),
                        "mean_percentile": float(np.mean(f.percentiles)),
                        "p_shift": f.p_shift,
                        "p_coverage": f.p_coverage,
                        "flagged": f.flagged,
                    }
                    for f in g.figures
                ],
                "pooled_acceptance": {
                    "measured": g.pooled.measured,
                    "simulated": g.pooled.simulated,
                    "z": g.pooled.z,
                    "p_value": g.pooled.p_value,
                    "off": g.pooled_off,
                },
                "progress_inside_mean": float(np.nanmean(g.progress_inside)),
            }
            for g in search.groups
        ],
    }
