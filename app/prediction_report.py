"""Predictions as a person reads them (a table) and as a program does (CSV, JSON)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from typing import Any

from rich.table import Table

from pxn.durations import format_duration
from pxn.scenario import Scenario
from pxn.sim.predict import Prediction


def dollars_text(p: Prediction) -> str:
    """A run's cost, its mean and 5-95% interval, as in "$12.40 [11.90-13.10]"."""
    if p.dollars is None:
        return ""
    d = p.dollars
    # Cents, or three significant figures of the mean when it is under a dollar.
    places = 2 if d.mean >= 1 or d.mean <= 0 else max(2, 2 - math.floor(math.log10(d.mean)))
    return f"${d.mean:,.{places}f} [{d.low:,.{places}f}-{d.high:,.{places}f}]"


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
    # Cost and provider limits: empty when the scenario has no prices, no limits.
    for name, interval in (
        ("dollars", p.dollars),
        ("throttled_share", p.throttled_share if p.rate_limited else None),
    ):
        row[f"{name}_mean"] = None if interval is None else interval.mean
        row[f"{name}_p5"] = None if interval is None else interval.low
        row[f"{name}_p95"] = None if interval is None else interval.high
    row["rate_bound_s"] = p.analytic.rate_bound if p.rate_limited else None
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
        if not p.rate_limited:
            data["throttled_share"] = None
        return data

    document = {"scenario": scenario.to_dict(), "predictions": [as_dict(p) for p in predictions]}
    return json.dumps(document, indent=2)


def predictions_table(scenario: Scenario, predictions: list[Prediction]) -> Table:
    reps = predictions[0].replicates
    pool = ""  # a local LM pool, only when the scenario has one
    pool += loads_text(scenario)
    priced, limited = scenario.prices is not None, predictions[0].rate_limited
    if limited:
        pool += f", rate limits {limits_text(scenario)}"
    caption = (
        "wall-clock: simulated mean [5-95%]; analytic: the paper's closed form; bound: B*T_e/W"
    )
    if priced:
        caption += "; dollars: mean [5-95%] per run"
    if limited:
        caption += (
            "; throttled: share of calls that waited for rate-limit capacity; "
            "rate bound: the least time the limits allow"
        )
    table = Table(
        title=(
            f"{scenario.name}: B={scenario.budget} metric calls, V={scenario.valset_size}, "
            f"b={scenario.minibatch}, W={scenario.workers}{pool}, {reps} replicates"
        ),
        caption=caption,
    )
    columns = [
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
    ]
    columns += ["dollars"] if priced else []
    columns += ["throttled", "rate bound"] if limited else []
    for column in columns:
        table.add_column(column, justify="left" if column == "shape" else "right")
    for p in predictions:
        cells = [
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
        ]
        cells += [dollars_text(p)] if priced else []
        if limited:
            cells += [f"{p.throttled_share.mean:.0%}", format_duration(p.analytic.rate_bound)]
        table.add_row(*cells)
    return table


def loads_text(scenario: Scenario) -> str:
    """The LM servers and load slowdown, once when both models share them, else per model."""
    loads = scenario.loads
    sides = (
        [("", loads.task)]
        if loads.task == loads.reflection
        else [("task ", loads.task), ("reflection ", loads.reflection)]
    )
    text = ""
    for role, load in sides:
        if load.servers is not None:
            text += f", {role}{load.servers} LM server(s)"
        if load.slowdown:
            text += f", {role}load slowdown {load.slowdown:.3g}"
    return text


def limits_text(scenario: Scenario) -> str:
    """The scenario's limits in words: task 500 rpm, reflection 60 rpm / 100000 tpm, burst 60 s."""
    limits = scenario.rate_limits
    parts = []
    for role, limit in (("task", limits.task), ("reflection", limits.reflection)):
        given = [f"{v:g} {unit}" for v, unit in ((limit.rpm, "rpm"), (limit.tpm, "tpm")) if v]
        if given:
            parts.append(f"{role} {' / '.join(given)}")
    return ", ".join([*parts, f"burst {limits.burst_seconds:g} s"])


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
