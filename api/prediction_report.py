"""Predictions as a person reads them (tables) and as a program does (CSV, JSON).

The closed form's speedup shown and written is the ratio of its own
wall-clocks, T(1)/T(k), so it reads against the analytic column beside it; the
paper's ratio formula (which drops the seed validation and the iterations'
dependence on k) is kept in the CSV and JSON as `paper_ratio`.

A scenario calibrated from runs (its [calibrated_on]) predicts a run
EXTRAPOLATION times longer or more only by extrapolating what those runs
showed; the report warns, with how much the parameter draws widen the
interval beyond run-to-run noise: the part of the spread that better
calibration could remove.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pxn.api.report import Note, Report, interval_columns
from pxn.api.tables import Column, Grid
from pxn.durations import format_duration, format_span
from pxn.scenario import Scenario
from pxn.sim.advise_ranking import score_text
from pxn.sim.predict import Interval, Prediction, Split

EXTRAPOLATION = 2.0  # a prediction this many times the calibrated run's length is warned of


def dollars_text(p: Prediction) -> str:
    """A run's cost, its mean and 5-95% interval, as in "$12.40 [11.90-13.10]"."""
    if p.dollars is None:
        return ""
    d = p.dollars
    # Cents, or three significant figures of the mean when it is under a dollar.
    places = 2 if d.mean >= 1 or d.mean <= 0 else max(2, 2 - math.floor(math.log10(d.mean)))
    return f"${d.mean:,.{places}f} [{d.low:,.{places}f}-{d.high:,.{places}f}]"


def percent(share: float, places: int = 0) -> str:
    """A share as a percentage; "-" when undefined (a run with no iteration has no share)."""
    return f"{share:.{places}%}" if math.isfinite(share) else "-"


def split_cells(split: Split | None) -> list[str]:
    """The parameters' share of the spread and the noise's 5-95%; "-" without draws (or with
    one replicate each)."""
    if split is None:
        return ["-", "-"]
    return [percent(split.parameter_share), format_span(split.noise.low, split.noise.high)]


def share_text(interval: Interval) -> str:
    """A share's interval as a person reads it: 42% [25-58%]."""
    return f"{interval.mean:.0%} [{interval.low:.0%}-{interval.high:.0%}]"


def analytic_speedup(p: Prediction) -> float:
    """The closed form's T(1)/T(k): the ratio of its wall-clock for single to this shape's."""
    return p.analytic_single / p.analytic.wall_clock


def prediction_row(p: Prediction) -> dict[str, Any]:
    """One flat record per shape: the columns of the CSV."""
    row: dict[str, Any] = {"shape": p.shape.label, "p": p.shape.p, "n": p.shape.n, "k": p.shape.k}
    row["replicates"] = p.replicates
    row |= interval_columns("wall_clock", p.wall_clock, "_s")
    for name in ("iterations", "full_val_share", "metric_calls"):
        row |= interval_columns(name, getattr(p, name))
    speedup = interval_columns("speedup", p.speedup)
    row["speedup_vs_single"] = speedup.pop("speedup_mean")
    row |= speedup
    for name in ("best_score", "test_score", "no_proposal_share"):  # None: not predicted
        row |= interval_columns(name, getattr(p, name))
    row["proposals_mean"] = p.proposals.mean
    row["accepted_mean"] = p.accepted.mean
    row["utilisation_mean"] = p.utilisation.mean
    for stage, seconds in p.stage_time.items():
        row[f"stage_{stage}_s"] = seconds
    row["analytic_wall_clock_s"] = p.analytic.wall_clock
    row["analytic_speedup"] = analytic_speedup(p)
    row["analytic_paper_ratio"] = p.analytic.speedup
    row["analytic_iterations"] = p.analytic.iterations
    row["analytic_q_k"] = p.analytic.q_k
    row["bound_s"] = p.analytic.bound
    # Cost and provider limits: empty when the scenario has no prices, no limits.
    row |= interval_columns("dollars", p.dollars)
    row |= interval_columns("throttled_share", p.throttled_share if p.rate_limited else None)
    row["rate_bound_s"] = p.analytic.rate_bound if p.rate_limited else None
    # Over parameter draws: the parameters' share of the spread, and the noise alone.
    split = p.wall_clock_split
    row["draws"] = p.draws
    row["wall_clock_parameter_share"] = None if split is None else split.parameter_share
    row["wall_clock_noise_p5_s"] = None if split is None else split.noise.low
    row["wall_clock_noise_p95_s"] = None if split is None else split.noise.high
    share = None if p.dollars_split is None else p.dollars_split.parameter_share
    row["dollars_parameter_share"] = share
    return row


def prediction_document(p: Prediction) -> dict[str, Any]:
    data = asdict(p)
    data["shape"] = p.shape.label
    data["analytic"]["paper_ratio"] = data["analytic"].pop("speedup")
    data["analytic"]["speedup"] = analytic_speedup(p)
    data["analytic"]["single_wall_clock"] = data.pop("analytic_single")
    if not p.rate_limited:
        data["throttled_share"] = None
    return data


def loads_text(scenario: Scenario) -> str:
    """The LM servers, load slowdown, prefix cache and run spread, once when both models share
    them, else per model."""
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
        if load.prefix_seconds:
            text += f", a sibling reflection saves {load.prefix_seconds:.3g} s (prefix cache)"
        if load.run_spread:
            text += f", {role}run spread {load.run_spread:.3g}"
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


@dataclass(frozen=True)
class Shown:
    """The optional parts of a predictions table: those a run's price, scores, losses,
    rate limits and parameter draws need, only when the predictions have them."""

    priced: bool
    scored: bool
    losing: bool
    limited: bool
    draws: int

    @classmethod
    def of(cls, scenario: Scenario, predictions: list[Prediction]) -> Shown:
        return cls(
            priced=scenario.prices is not None,
            scored=predictions[0].best_score is not None,
            losing=predictions[0].no_proposal_share is not None,
            limited=predictions[0].rate_limited,
            draws=max(p.draws for p in predictions),
        )


def predictions_table(scenario: Scenario, predictions: list[Prediction]) -> Grid:
    """One row per shape; the columns a run's price and limits need only when it has them."""
    shown = Shown.of(scenario, predictions)
    setting = loads_text(scenario)
    if shown.limited:
        setting += f", rate limits {limits_text(scenario)}"
    if shown.draws:
        setting += f", {shown.draws} parameter draws"
    given = "" if scenario.budget_given is None else f" ({scenario.budget_given})"  # auto:light
    grid = Grid(
        title=(
            f"{scenario.name}: B={scenario.budget}{given} metric calls, "
            f"V={scenario.valset_size}, "
            f"b={scenario.minibatch}, W={scenario.workers}{setting}, "
            f"{predictions[0].replicates} replicates"
        ),
        columns=predictions_columns(shown),
        caption=predictions_caption(shown),
    )
    for p in predictions:
        grid.add_row(*prediction_cells(p, shown))
    return grid


def predictions_caption(shown: Shown) -> str:
    """What the predictions table's columns mean, those it shows."""
    caption = (
        "wall-clock: simulated mean [5-95%]; analytic: the paper's closed form T(k), "
        "its speedup T(1)/T(k); bound: B*T_e/W"
    )
    if shown.priced:
        caption += "; dollars: mean [5-95%] per run"
    if shown.scored:
        caption += (
            "; best val: the best mean validation score a run ends with; test: that "
            "candidate's expected score on fresh examples, mean [5-95%]"
        )
    if shown.losing:
        caption += (
            "; no proposal: share of iterations whose every task was skipped or lost before "
            "gepa judged it ([failures]), mean [5-95%]"
        )
    if shown.limited:
        caption += (
            "; throttled: share of calls that waited for rate-limit capacity; "
            "rate bound: the least time the limits allow"
        )
    if shown.draws:
        caption += (
            "; 5-95% spans the parameters' uncertainty and run-to-run noise; params: the "
            "parameters' share of the wall-clock's variance (better calibration narrows it); "
            "noise: the 5-95% of run-to-run noise alone"
        )
    return caption


def predictions_columns(shown: Shown) -> list[Column]:
    draws, scored, limited = shown.draws, shown.scored, shown.limited
    return [
        Column("shape", left=True),
        Column("wall-clock"),
        Column("5-95%"),
        # Under the quality model the test score takes the parameters' share's place.
        *([Column("params", rank=2 if scored else 1, words="parameters' share")] if draws else []),
        *([Column("noise\n5-95%", rank=3, words="noise 5-95%")] if draws else []),
        Column("speedup"),
        *(
            [Column("test", rank=1, words="test score"), Column("best val", rank=2)]
            if scored
            else []
        ),
        *([Column("dollars")] if shown.priced else []),
        *([Column("throttled", rank=1)] if limited else []),
        Column("iterations", rank=1),
        *([Column("no\nproposal", rank=1, words="no proposal")] if shown.losing else []),
        Column("full-val", rank=2),
        Column("metric\ncalls", rank=4),
        Column("util.", rank=4, words="utilisation"),
        Column("analytic", rank=1),
        Column("analytic\nspeedup", rank=1),
        Column("bound", rank=3),
        *([Column("rate\nbound", rank=3)] if limited else []),
    ]


def prediction_cells(p: Prediction, shown: Shown) -> list[str]:
    """One shape's row of the predictions table."""
    draws, scored, limited = shown.draws, shown.scored, shown.limited
    return [
        p.shape.label,
        format_duration(p.wall_clock.mean),
        format_span(p.wall_clock.low, p.wall_clock.high),
        *(split_cells(p.wall_clock_split) if draws else []),
        "-" if p.speedup is None else f"{p.speedup.mean:.2f}x",
        *([score_text(p.test_score), score_text(p.best_score)] if scored else []),
        *([dollars_text(p)] if shown.priced else []),
        *([percent(p.throttled_share.mean)] if limited else []),
        f"{p.iterations.mean:.1f}",
        *([share_text(p.no_proposal_share)] if shown.losing else []),
        percent(p.full_val_share.mean),
        f"{p.metric_calls.mean:.0f}",
        percent(p.utilisation.mean, 1),
        format_duration(p.analytic.wall_clock),
        f"{analytic_speedup(p):.2f}x",
        format_duration(p.analytic.bound),
        *([format_duration(p.analytic.rate_bound)] if limited else []),
    ]


def stage_table(prediction: Prediction) -> Grid:
    """Where one shape's wall-clock goes, stage by stage (simulated means)."""
    grid = Grid(
        title=f"time per stage, {prediction.shape.label}",
        columns=[Column("stage", left=True), Column("mean time"), Column("share")],
    )
    total = prediction.wall_clock.mean
    for stage, seconds in prediction.stage_time.items():
        # Shown rounded, and a rounded zero unsigned: the overhead is what is
        # left of the wall-clock after the stages, and float noise leaves -1e-14.
        shown = round(seconds, 1) + 0.0
        grid.add_row(stage, format_duration(shown), f"{round(shown / total, 3) + 0.0:.1%}")
    return grid


def widening(p: Prediction) -> float | None:
    """How many times wider the wall-clock's 5-95% is than run-to-run noise's alone."""
    split = p.wall_clock_split
    if split is None or split.noise.high <= split.noise.low:
        return None
    return (p.wall_clock.high - p.wall_clock.low) / (split.noise.high - split.noise.low)


def extrapolation_warning(scenario: Scenario, predictions: list[Prediction]) -> Note | None:
    """Say so when the prediction runs well past what the scenario was calibrated on."""
    seen = scenario.calibrated_on
    if seen is None:
        return None
    proposals = max(p.proposals.mean for p in predictions)
    calls_ratio = scenario.budget / seen.metric_calls
    proposals_ratio = proposals / seen.proposals if seen.proposals else math.inf
    if max(calls_ratio, proposals_ratio) < EXTRAPOLATION:
        return None
    text = (
        f"calibrated on runs of up to {seen.metric_calls} metric calls and {seen.proposals} "
        f"proposals ({seen.runs} run(s)); predicting {scenario.budget} metric calls "
        f"({calls_ratio:.3g}x) and up to {proposals:.0f} proposals: acceptance beyond proposal "
        f"{seen.proposals} is extrapolated"
    )
    acceptance = scenario.acceptance
    if acceptance is not None and acceptance.tau is not None and acceptance.decay_until is not None:
        text += f" (the fitted decay held at its rate at proposal {acceptance.decay_until:g})"
    widths = {p.shape.label: w for p in predictions if (w := widening(p)) is not None}
    if widths:
        widest = max(widths, key=widths.__getitem__)
        text += (
            f"; the parameter draws widen the wall-clock's 5-95% interval by up to "
            f"{max(widths[widest] - 1, 0):.0%} ({widest}) over run-to-run noise alone, and a "
            "longer run can drift further than the draws know"
        )
    elif any(p.draws for p in predictions):
        text += (
            "; the interval spans the parameter draws, but with one replicate per draw how much "
            "they widen it is unknown (give --reps at least twice the draws)"
        )
    else:
        text += (
            "; the scenario has no parameter draws, so the interval holds run-to-run noise "
            "alone: how far off the prediction could be is unknown (pxn calibrate --draws N)"
        )
    return Note(text, label="warning")


def predictions_report(
    scenario: Scenario, predictions: list[Prediction], stages: bool = False
) -> Report:
    """The sweep (or, with `stages`, the one shape simulated) in every form."""
    shown: list = [predictions_table(scenario, predictions)]
    if stages:
        shown += [stage_table(p) for p in predictions]
    # The same for every shape (they ran the same replicates): said once.
    shown += [Note(note) for note in dict.fromkeys(n for p in predictions for n in p.notes)]
    warning = extrapolation_warning(scenario, predictions)
    if warning is not None:
        shown.append(warning)
    return Report(
        name="sweep",
        shown=shown,
        rows=[prediction_row(p) for p in predictions],
        document={
            "scenario": scenario.to_dict(),
            "predictions": [prediction_document(p) for p in predictions],
        },
    )
