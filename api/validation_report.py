"""Validation results as a table (a person), CSV and JSON (a program)."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pxn.api.report import Note, Report, interval_columns
from pxn.api.tables import Column, Grid
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


def validation_document(v: ScenarioValidation) -> dict[str, Any]:
    return {
        "scenario": v.scenario.to_dict(),
        "summary": summary_record(v),
        "runs": [check_row(c) for c in v.checks],
        "set_aside": v.rejected,
        "skipped_lines": v.skipped_lines,
    }


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
    return Report(
        name="validation",
        shown=[validation_table(v)]
        + ([] if score is None else [Note(score, label="score")])
        + ([] if lost is None else [Note(lost, label="lost")])
        + ([] if v.acceptance is None else [Note(v.acceptance.verdict, label="acceptance")]),
        rows=[check_row(c) for c in v.checks],
        document=validation_document(v),
    )
