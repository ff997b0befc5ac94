"""The checks as a person reads them and as a program does: the validation (each run
beside its prediction, the verdict) and the conformance (the time check's (shape, W)
groups and verdict; on the quality task, the search's figures after it). The CSV has a
row per run.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from pxn.api.report import Note, Report, interval_columns
from pxn.api.tables import Column, Grid
from pxn.checks.conformance import Conformance, Group
from pxn.checks.search_conformance import FigureCheck, SearchConformance
from pxn.checks.validate import Check, ScenarioValidation
from pxn.durations import format_duration, format_span
from pxn.sim.predict import Interval
from pxn.trace_reading import TRACE_NAME


def check_row(c: Check) -> dict[str, Any]:
    """One flat record per measured run: the columns of the CSV."""
    p, m = c.predicted, c.measured
    return {
        "run": c.run,
        "shape": c.shape.label,
        "k": c.shape.k,
        "status": c.status,
        "resumed": c.resumed,
        "measured_wall_clock_s": c.wall_clock,
        "after_loop_s": c.after_loop,
        **interval_columns("sim_wall_clock", p.wall_clock, "_s"),
        "sim_error": c.sim_error,
        "inside_interval": c.inside,
        "percentile": c.percentile,
        "analytic_wall_clock_s": p.analytic.wall_clock,
        "analytic_error": c.analytic_error,
        "measured_iterations": m.iterations,
        **interval_columns("sim_iterations", p.iterations),
        "analytic_iterations": p.analytic.iterations,
        "sim_iterations_error": _relative(p.iterations.mean, m.iterations),
        "analytic_iterations_error": _relative(p.analytic.iterations, m.iterations),
        "measured_full_val_share": m.full_val_share,
        "sim_full_val_share_mean": p.full_val_share.mean,
        "analytic_q_k": p.analytic.q_k,
        # A share is already a fraction: its error is the difference, in points.
        "sim_full_val_share_diff": p.full_val_share.mean - m.full_val_share,
        "analytic_full_val_share_diff": p.analytic.q_k - m.full_val_share,
        "measured_proposals": m.proposals,
        "measured_accepted": m.accepted,
        "sim_proposals_mean": p.proposals.mean,
        "sim_accepted_mean": p.accepted.mean,
        "measured_no_proposal_share": m.no_proposal_share,
        "sim_no_proposal_share_mean": _mean(p.no_proposal_share),
        "measured_failed_share": m.failed_share,
        "sim_failed_share_mean": _mean(p.failed_share),
        "replicates": p.replicates,
        "measured_best_score": m.best_score,
        **interval_columns("sim_best_score", p.best_score),
        "best_score_inside": c.score_inside,
    }


def _mean(interval: Interval | None) -> float | None:
    return None if interval is None else interval.mean


def _relative(predicted: float, measured: float) -> float:
    return predicted / measured - 1 if measured else math.nan


def summary_record(v: ScenarioValidation) -> dict[str, Any]:
    inside, counted = v.coverage
    return {
        "runs": len(v.checks),
        "completed_runs": counted,
        "sim_mape": v.sim_mape,
        "analytic_mape": v.analytic_mape,
        "sim_interval_coverage": inside / counted if counted else math.nan,
        "inside": inside,
        "honesty": asdict(v.honesty),
        "acceptance": None if v.acceptance is None else asdict(v.acceptance),
        "best_score_inside": None if v.score_coverage is None else v.score_coverage[0],
        "best_score_judged": None if v.score_coverage is None else v.score_coverage[1],
        "best_score_mean_abs_error": v.score_error,
    }


def summary_line(v: ScenarioValidation) -> str:
    inside, counted = v.coverage
    if not counted:
        return "no completed run to score: errors and coverage need finished runs"
    return (
        f"{counted} completed run(s): simulator MAPE {v.sim_mape:.1%}, analytic MAPE "
        f"{v.analytic_mape:.1%}; {inside}/{counted} inside the simulated 5-95% interval "
        f"({v.replicates} replicates each)"
    )


def score_line(v: ScenarioValidation) -> str | None:
    """The runs' best validation scores against the quality model's predictions."""
    if v.score_coverage is None:
        return None
    inside, judged = v.score_coverage
    return (
        f"best validation score: {inside}/{judged} runs inside the predicted 5-95% interval, "
        f"the predicted mean off by {v.score_error:.3f} on average"
    )


def lost_line(v: ScenarioValidation) -> str | None:
    """The proposals the runs lost before gepa judged them, against the predictions'."""
    judged = [c for c in v.counted if c.predicted.no_proposal_share is not None]
    if not judged:
        return None

    def mean(values: list[float]) -> str:
        finite = [x for x in values if math.isfinite(x)]
        return f"{sum(finite) / len(finite):.0%}" if finite else "-"

    return (
        "proposals lost before gepa judged them: "
        f"{mean([c.measured.failed_share for c in judged])} of the tasks measured, "
        f"{mean([c.predicted.failed_share.mean for c in judged])} predicted; iterations "
        f"without a proposal: {mean([c.measured.no_proposal_share for c in judged])} measured, "
        f"{mean([c.predicted.no_proposal_share.mean for c in judged])} predicted "
        f"(means over {len(judged)} run(s))"
    )


def run_label(run: str) -> str:
    """A run directory by its name (runs/NAME -> NAME); a loose trace file by its path."""
    path = Path(run)
    return path.parent.name if path.name == TRACE_NAME else run


def validation_table(v: ScenarioValidation) -> Grid:
    grid = Grid(
        title=f"measured vs predicted, scenario {v.scenario.name}",
        columns=[
            Column("run", left=True),
            Column("shape", left=True),
            Column("measured"),
            Column("simulated [5-95%]"),
            Column("in", words="inside the interval"),
            Column("pct.", rank=1, words="percentile in the prediction"),
            Column("sim err", rank=1, words="simulator's error"),
            Column("analytic", rank=1),
            Column("an. err", rank=1, words="analytic error"),
            Column("iters\nm/sim/an", rank=2, words="iterations measured/simulated/analytic"),
            Column("full-val\nm/sim/an", rank=2, words="full-val measured/simulated/analytic"),
        ],
        caption=summary_line(v)
        + f"\n{v.honesty.verdict}"
        + "\nmeasured: to the end of gepa's last iteration; pct.: the share of simulated runs "
        "faster than the measured one (uniform on 0-1 when the predictions are right)",
    )
    for c in v.checks:
        p, m = c.predicted, c.measured
        status = "" if c.complete else f" ({c.status})"
        simulated = format_span(p.wall_clock.low, p.wall_clock.high)
        grid.add_row(
            run_label(c.run) + status + (" (resumed)" if c.resumed else ""),
            c.shape.label,
            format_duration(c.wall_clock),
            f"{format_duration(p.wall_clock.mean)} [{simulated}]",
            "yes" if c.inside else "no",
            f"{c.percentile:.2f}",
            f"{c.sim_error:+.1%}",
            format_duration(p.analytic.wall_clock),
            f"{c.analytic_error:+.1%}",
            f"{m.iterations}/{p.iterations.mean:.1f}/{p.analytic.iterations:.1f}",
            f"{m.full_val_share:.0%}/{p.full_val_share.mean:.0%}/{p.analytic.q_k:.0%}",
        )
    return grid


def validation_report(v: ScenarioValidation) -> Report:
    score, lost = score_line(v), lost_line(v)
    rows = [check_row(c) for c in v.checks]
    return Report(
        name="validation",
        shown=[validation_table(v)]
        + ([] if score is None else [Note(score, label="score")])
        + ([] if lost is None else [Note(lost, label="lost")])
        + ([] if v.acceptance is None else [Note(v.acceptance.verdict, label="acceptance")]),
        rows=rows,
        document={
            "scenario": v.scenario.to_dict(),
            "summary": summary_record(v),
            "runs": rows,
            "set_aside": v.rejected,
            "skipped_lines": v.skipped_lines,
        },
    )


# Each figure's name, and how it is written: a share as a percentage, a count or a score
# as a number.
FIGURES = {
    "acceptance": ("acceptance", "{:.1%}"),
    "skipped_share": ("skipped share", "{:.1%}"),
    "iterations": ("iterations", "{:.1f}"),
    "best_score": ("best val score", "{:.3f}"),
    "test_score": ("test score", "{:.3f}"),
}


def shown(check: FigureCheck, value: float) -> str:
    return FIGURES[check.figure][1].format(value)


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
                FIGURES[check.figure][0],
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
