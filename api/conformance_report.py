"""Conformance as a person reads it: the time check's table of (shape, W) groups and its
verdict; on the quality task, the search's after it, a row per shape and figure.

Of the search: a figure's measured mean, the simulated mean and 5-95% interval of one run,
their difference, how many runs fell inside and the shift test's p-value;
beneath, each group's pooled acceptance and how much of its runs' best score
over time lay inside the simulated band, and the verdict. Rows (for the CSV)
are per run: its figures and its percentiles among the replicates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pxn.api.report import Note, Report, interval_columns
from pxn.api.tables import Column, Grid
from pxn.api.validation_report import check_row
from pxn.checks.conformance import Conformance, Group
from pxn.checks.search_conformance import FigureCheck, SearchConformance

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
                        **interval_columns("simulated", f.simulated),
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


def with_search(time: Report, search: Report) -> Report:
    """The time check's report with the search's after it: each run's row with its figures of
    the search, the JSON's document with the search's under "search"."""
    figures = {row["run"]: row for row in search.rows}
    return Report(
        name=time.name,
        shown=[*time.shown, *search.shown],
        rows=[row | figures[row["run"]] for row in time.rows],
        document=time.document | {"search": search.document},
    )


def conformance_report(result: Conformance, time_scale: float, sleeps: dict[str, float]) -> Report:
    """The groups as a table, the verdict beneath; every run in the CSV and the JSON."""
    notes = [
        Note(result.verdict, label="verdict"),
        Note(
            f"{result.acceptance_measured:.1%} of proposals accepted, the simulator "
            f"{result.acceptance_simulated:.1%}; calls slept {sleeps['rollouts']:+.2%} "
            f"(rollouts) and {sleeps['reflections']:+.2%} (reflections) beyond their draws",
            label="acceptance",
        ),
    ]
    notes += [Note(reason, label="set aside") for reason in result.rejected]
    rows = [
        {
            **check_row(r.check),
            "workers": r.check.measured_setup["workers"],
            "percentile": r.percentile,
            "trace_check": r.trace_check,
        }
        for r in result.runs
    ]
    document = {
        "gepa": result.gepa_versions,
        "conforms": result.conforms,
        "verdict": result.verdict,
        "time_scale": time_scale,
        "scenario": result.scenario.to_dict(),
        "p_uniform": result.p_uniform,
        "p_coverage": result.p_coverage,
        "inside": result.inside,
        "runs_counted": len(result.runs),
        "sim_mape": result.sim_mape,
        "analytic_mape": result.analytic_mape,
        "acceptance_measured": result.acceptance_measured,
        "acceptance_simulated": result.acceptance_simulated,
        "oversleep": sleeps,
        "groups": [group_record(g) for g in result.groups],
        "runs": rows,
        "set_aside": result.rejected,
    }
    shown = [groups_table(result, time_scale), *notes]
    return Report(name="conformance", shown=shown, rows=rows, document=document)


def groups_table(result: Conformance, time_scale: float) -> Grid:
    """A row per (shape, W) group: how many of its runs fell inside, the errors, the flag."""
    grid = Grid(
        title=f"real gepa on synthetic work vs the simulator (time scale {time_scale:g})",
        columns=[
            Column("shape", left=True),
            Column("W"),
            Column("in", words="runs inside the simulated 5-95% interval"),
            Column("mean\npct", words="mean percentile among the simulated runs"),
            Column("measured", words="measured mean wall-clock"),
            Column("simulated", words="simulated mean wall-clock"),
            Column("sim\nMAPE", rank=1, words="simulator MAPE"),
            Column("closed\nMAPE", rank=1, words="closed-form MAPE"),
            Column("overhead\nms/stage", rank=2, words="gepa's overhead, ms per stage"),
            Column("flag", left=True),
        ],
        caption=f"{result.replicates} simulated replicates per run's setup; seconds as slept "
        f"(the scenario's times {time_scale:g})",
    )
    for g in result.groups:
        measured = sum(r.check.wall_clock for r in g.runs) / len(g.runs)
        simulated = sum(r.check.predicted.wall_clock.mean for r in g.runs) / len(g.runs)
        grid.add_row(
            g.shape.label,
            str(g.workers),
            f"{g.inside}/{len(g.runs)}",
            f"{g.mean_percentile:.0%}",
            f"{measured:.2f} s",
            f"{simulated:.2f} s",
            f"{g.sim_mape:.1%}",
            f"{g.analytic_mape:.1%}",
            f"{g.stage_overhead * 1000:.1f}",
            "OFF" if g.flagged else "",
        )
    return grid


def group_record(g: Group) -> dict[str, Any]:
    return {
        "shape": g.shape.label,
        "workers": g.workers,
        "runs": len(g.runs),
        "inside": g.inside,
        "mean_percentile": g.mean_percentile,
        "sim_mape": g.sim_mape,
        "analytic_mape": g.analytic_mape,
        "stage_overhead_s": g.stage_overhead,
        "p_uniform": g.p_uniform,
        "p_coverage": g.p_coverage,
        "flagged": g.flagged,
    }
