"""Predictions as a person reads them (a table) and as a program does (CSV, JSON)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from rich.table import Table

from pxn.scenario import Scenario
from pxn.sim.predict import Prediction


def format_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def prediction_row(p: Prediction) -> dict[str, Any]:
    """One flat record per shape: the columns of the CSV."""
    row: dict[str, Any] = {"shape": p.shape.label, "p": p.shape.p, "n": p.shape.n, "k": p.shape.k}
    row["replicates"] = p.replicates
    for name in ("wall_clock", "iterations", "full_val_share", "metric_calls"):
        interval = getattr(p, name)
        unit = "_s" if name == "wall_clock" else ""
        row[f"{name}_mean{unit}"] = interval.mean
        row[f"{name}_p5{unit}"] = interval.low
        row[f"{name}_p95{unit}"] = interval.high
    row["speedup_vs_single"] = p.speedup
    row["proposals_mean"] = p.proposals.mean
    row["accepted_mean"] = p.accepted.mean
    row["utilisation_mean"] = p.utilisation.mean
    for stage, seconds in p.stage_time.items():
        row[f"stage_{stage}_s"] = seconds
    row["analytic_wall_clock_s"] = p.analytic.wall_clock
    row["analytic_speedup"] = p.analytic.speedup
    row["analytic_iterations"] = p.analytic.iterations
    row["analytic_q_k"] = p.analytic.q_k
    row["bound_s"] = p.analytic.bound
    return row


def predictions_csv(predictions: list[Prediction]) -> str:
    rows = [prediction_row(p) for p in predictions]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def predictions_json(scenario: Scenario, predictions: list[Prediction]) -> str:
    def as_dict(p: Prediction) -> dict[str, Any]:
        data = asdict(p)
        data["shape"] = p.shape.label
        return data

    document = {"scenario": scenario.to_dict(), "predictions": [as_dict(p) for p in predictions]}
    return json.dumps(document, indent=2)


def predictions_table(scenario: Scenario, predictions: list[Prediction]) -> Table:
    reps = predictions[0].replicates
    pool = ""  # a local LM pool, only when the scenario has one
    if scenario.lm_servers is not None:
        pool += f", {scenario.lm_servers} LM server(s)"
    if scenario.load_slowdown:
        pool += f", load slowdown {scenario.load_slowdown:.3g}"
    table = Table(
        title=(
            f"{scenario.name}: B={scenario.budget} metric calls, V={scenario.valset_size}, "
            f"b={scenario.minibatch}, W={scenario.workers}{pool}, {reps} replicates"
        ),
        caption="wall-clock: simulated mean [5-95%]; analytic: the paper's closed form; "
        "bound: B*T_e/W",
    )
    for column in (
        "shape",
        "wall-clock",
        "5-95%",
        "speedup",
        "iterations",
        "full-val",
        "metric calls",
        "util.",
        "analytic",
        "an. speedup",
        "bound",
    ):
        table.add_column(column, justify="left" if column == "shape" else "right")
    for p in predictions:
        table.add_row(
            p.shape.label,
            format_duration(p.wall_clock.mean),
            f"{format_duration(p.wall_clock.low)} - {format_duration(p.wall_clock.high)}",
            f"{p.speedup:.2f}x",
            f"{p.iterations.mean:.1f}",
            f"{p.full_val_share.mean:.0%}",
            f"{p.metric_calls.mean:.0f}",
            f"{p.utilisation.mean:.1%}",
            format_duration(p.analytic.wall_clock),
            f"{p.analytic.speedup:.2f}x",
            format_duration(p.analytic.bound),
        )
    return table


def stage_table(prediction: Prediction) -> Table:
    """Where one shape's wall-clock goes, stage by stage (simulated means)."""
    table = Table(title=f"time per stage, {prediction.shape.label}")
    table.add_column("stage")
    table.add_column("mean time", justify="right")
    table.add_column("share", justify="right")
    total = prediction.wall_clock.mean
    for stage, seconds in prediction.stage_time.items():
        table.add_row(stage, format_duration(seconds), f"{seconds / total:.1%}")
    return table
