"""The quality model from the scores traces hold: figures read off, metric told, recovered.

Simulated runs of a known [quality] table, traced, are calibrated as a user's
would be; the inference must recover what the scores can pin (the seed's
score) inside its posterior interval, and hold the runs' own figures in its
posterior predictive.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sim_helpers import searched

from pxn.api.calibration_report import WIDTH, quality_lines, seed_validation_line
from pxn.calibrate.summaries.facts import InferenceOptions
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.calibrate.traces.quality import (
    metric_of,
    scored,
    seed_scores,
    seed_validation,
    trace_summaries,
)
from pxn.errors import PxnError
from pxn.quality import Quality
from pxn.run_summary import summarize
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import TraceWriter, Validation
from pxn.trace_reading import load_traces, read_trace

TRUE = {"seed_score": 0.4, "change_mean": 0.2, "ceiling": 0.8, "eval_noise": 0.3}


def traced_runs(tmp_path: Path, scenario, runs: int) -> list[Path]:
    paths = []
    for replicate in range(runs):
        path = tmp_path / f"run{replicate}" / "trace.jsonl"
        path.parent.mkdir()
        with TraceWriter(path) as writer:
            simulate_once(scenario, Shape(1, 1), replicate, writer)
        paths.append(path.parent)
    return paths


def test_a_scored_trace_gives_one_fact_per_search_figure(tmp_path: Path) -> None:
    paths = traced_runs(tmp_path, searched(TRUE, budget=500, valset_size=30), 2)
    traces = load_traces(paths).traces
    assert scored(traces) and metric_of(traces) == ("binary", 1)
    summaries = trace_summaries(traces, InferenceOptions())
    assert [r.shape for r in summaries.runs] == [Shape(1, 1)] * 2
    quantities = {f.quantity for f in summaries.facts}
    assert {"seed_score", "best_score", "acceptance", "val_gain"} <= quantities
    assert "test_score" not in quantities  # gepa never sees a test set
    seed = next(f for f in summaries.facts if f.quantity == "seed_score" and f.runs == (0,))
    validations = read_trace(paths[0] / "trace.jsonl").of(Validation)
    assert seed.low == next(v.score for v in validations if v.iteration == 0)
    # A share of counted events is known to half an event: its reach, not a point.
    summary = summarize(traces[0])
    acceptance = next(f for f in summaries.facts if f.quantity == "acceptance" and f.runs == (0,))
    assert acceptance.precision == pytest.approx(0.5 / summary.proposals)
    # A mean of score differences on V = 30 examples: known to half an example's grade.
    gain = next(f for f in summaries.facts if f.quantity == "val_gain" and f.runs == (0,))
    assert gain.precision == pytest.approx(0.5 / (30 * summary.accepted))


def test_the_seeds_validation_is_kept_where_every_trace_measured_it_alike(
    tmp_path: Path,
) -> None:
    """Runs on one valset, the seed noiseless: each trace's seed scores are the same, and
    they are what calibration keeps. Runs each on examples of their own (the simulator's
    replicates): they differ, and none is kept, nor is one run's when a score is missing."""
    measured = (1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    same = searched(TRUE | {"eval_noise": 0.0, "seed_validation": measured}, budget=200,
                    valset_size=10)  # fmt: skip
    (tmp_path / "same").mkdir()
    (tmp_path / "own").mkdir()
    traces = load_traces(traced_runs(tmp_path / "same", same, 2)).traces
    assert [seed_scores(t) for t in traces] == [measured, measured]
    assert seed_validation(traces) == measured
    own = load_traces(traced_runs(tmp_path / "own", searched(TRUE, budget=200, valset_size=10), 2))
    assert seed_validation(own.traces) == ()
    assert seed_validation(own.traces[:1]) == seed_scores(own.traces[0]) != ()
    kept = seed_validation_line(Quality(0.4, seed_validation=measured))
    assert "kept as every run measured it (0.4 over 10 examples)" in kept
    assert "not kept" in seed_validation_line(Quality(0.4))


@pytest.mark.parametrize(("metric", "levels"), [("graded", 4), ("continuous", 1)])
def test_the_metric_is_read_off_the_scores(tmp_path: Path, metric: str, levels: int) -> None:
    quality = TRUE | {"metric": metric, "levels": levels}
    paths = traced_runs(tmp_path, searched(quality, budget=300, valset_size=20), 1)
    assert metric_of(load_traces(paths).traces) == (metric, levels)


def test_unscored_traces_refuse_the_quality_model(tmp_path: Path) -> None:
    from sim_helpers import make_scenario

    paths = traced_runs(tmp_path, make_scenario(budget=300), 1)
    with pytest.raises(PxnError, match="no validation scores"):
        calibrate_traces(paths, search="quality")
    assert calibrate_traces(paths).quality is None  # auto: acceptance rates


@pytest.mark.slow
def test_the_quality_model_round_trips(tmp_path: Path) -> None:
    """Four traced single runs of a known model, calibrated: the seed's true score inside
    the posterior's 5-95%, and most of the runs' figures inside the posterior predictive."""
    scenario = searched(TRUE, budget=700, valset_size=40, trainset_size=60)
    cal = calibrate_traces(traced_runs(tmp_path, scenario, 4), draws=20, search="quality", jobs=2)
    fit = cal.quality
    assert fit is not None and cal.scenario.acceptance is None
    posterior = {p.path: p for p in fit.inference.parameters}
    seed = posterior["quality.seed_score"]
    assert seed.low <= TRUE["seed_score"] <= seed.high
    assert seed.verdict == "pinned"
    inside = sum(check.inside for check in fit.inference.checks)
    assert inside >= 0.8 * len(fit.inference.checks)
    assert fit.quality.seed_validation == ()  # each run drew examples of its own
    drawn = {p for d in cal.scenario.uncertainty.draws for p in d}
    assert "quality.change_mean" in drawn and not any(p.startswith("acceptance.") for p in drawn)
    # The note on draws without headroom is a paragraph wrapped to the report's width.
    noted = dataclasses.replace(cal, quality=dataclasses.replace(fit, no_headroom=3))
    lines = quality_lines(noted)
    start = next(i for i, line in enumerate(lines) if "posterior draws put the ceiling" in line)
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    note = lines[start:end]
    assert note[0].startswith("  3 of ") and len(note) > 1
    assert all(len(line) <= WIDTH for line in note), note


def test_validate_sets_the_runs_best_scores_beside_their_prediction(tmp_path: Path) -> None:
    """Runs simulated from the scenario itself: their best scores are judged against the
    predicted 5-95%, and most fall inside (the model is the truth here)."""
    from pxn.checks.validate import validate_runs

    scenario = searched(TRUE, budget=400, valset_size=30)
    paths = traced_runs(tmp_path, scenario.replace(seed=99), 6)
    validation = validate_runs(scenario, paths, replicates=60)
    inside, judged = validation.score_coverage
    assert judged == 6 and inside >= 4
    assert 0 <= validation.score_error < 0.2


def test_plot_progress_overlays_measured_runs(tmp_path: Path) -> None:
    from conftest import run_pxn

    path = tmp_path / "q.toml"
    searched(TRUE, budget=300, valset_size=20).save(path)
    runs = traced_runs(tmp_path, searched(TRUE, budget=300, valset_size=20), 2)
    out = tmp_path / "progress.png"
    ran = run_pxn("plot", "progress", path, "-o", out, "--reps", "20", *runs)
    assert ran.returncode == 0, ran.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from sim_helpers import make_scenario

    rates = tmp_path / "rates.toml"
    make_scenario(budget=300).save(rates)
    refused = run_pxn("plot", "progress", rates, "-o", tmp_path / "x.png", "--reps", "4")
    assert refused.returncode == 2 and "no [quality] model" in refused.stderr


@pytest.mark.slow
def test_runs_that_accepted_proposals_keep_the_point_above_the_seed(tmp_path: Path) -> None:
    """A ceiling just above the seed: the posterior reaches below the seed's score. The point
    keeps the headroom the runs found; the draws keep the rest, as a next run may find
    nothing (noisy scores accept proposals that change nothing)."""
    truth = {"seed_score": 0.35, "change_mean": 0.3, "ceiling": 0.38, "eval_noise": 0.8}
    paths = traced_runs(tmp_path, searched(truth, budget=300, valset_size=12), 2)
    assert sum(summarize(read_trace(p / "trace.jsonl")).accepted for p in paths) > 0
    calibration = calibrate_traces(paths, draws=40, search="quality")
    fit = calibration.quality
    assert fit.quality.ceiling > fit.quality.seed_score
    without = [d for d in fit.draws if d["quality.ceiling"] <= d["quality.seed_score"]]
    assert fit.no_headroom == len(without) > 0
    scenario = calibration.scenario
    drawn = [scenario.for_replicate(i).quality for i in range(len(scenario.uncertainty))]
    assert sum(q.ceiling <= q.seed_score for q in drawn) == len(without)
