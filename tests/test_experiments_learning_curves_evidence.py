"""The learning-curve evidence study's helpers (experiments/learning_curves_evidence/):
a trace read at a smaller budget, and real runs' readings against a predicted curve.

A trace read at budget B must be the run a run given B would have been: the simulator's
own prefix rule (sim/model.py) gives the reference, a simulated run to 400 read at each
smaller budget against a separate simulation at it (iterations, calls, proposals,
verdicts and the best score exactly; the wall-clock to float rounding). On real runs, a
run of the task of known quality to 4000 read at 500 must agree with the recorded
quality study's run at 500 of its shape and seed, event by event (gepa and the task are
deterministic given the seed).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
from sim_helpers import searched

from pxn.run_summary import summarize
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import Resume, TraceWriter
from pxn.trace_reading import read_trace

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "experiments" / "learning_curves_evidence"
sys.path.insert(0, str(STUDY))

from budget_reading import at_budget, best_score_at  # noqa: E402
from compare import Interval, Reading, gain_rows, score_rows  # noqa: E402
from evidence import prefix_differences  # noqa: E402

BUDGETS = (20, 21, 95, 250, 251, 399, 400)  # V = 20: the seed alone, then more


def simulated_trace(tmp_path: Path, scenario, shape: Shape):
    path = tmp_path / f"{shape}.jsonl"
    with TraceWriter(path) as writer:
        simulate_once(scenario, shape, 0, writer)
    return read_trace(path)


@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2)], ids=str)
def test_a_trace_read_at_a_budget_is_the_run_given_it(tmp_path, shape):
    scenario = searched({"seed_score": 0.3})
    trace = simulated_trace(tmp_path, scenario, shape)
    for budget in BUDGETS:
        read = summarize(at_budget(trace, budget))
        given = simulate_once(scenario.replace(budget=budget), shape, 0)
        for name in ("iterations", "metric_calls", "proposals", "accepted", "best_score"):
            assert getattr(read, name) == getattr(given, name), (budget, name)
        assert read.wall_clock == pytest.approx(given.wall_clock, rel=1e-12), budget
        assert best_score_at(trace, budget) == given.best_score


def test_the_prefix_declares_its_budget_and_ends_where_gepa_would_stop(tmp_path):
    trace = simulated_trace(tmp_path, searched({"seed_score": 0.3}), Shape(1, 1))
    prefix = at_budget(trace, 95)
    assert prefix.run_start.budget == 95
    assert prefix.run_end is not None and prefix.run_end.metric_calls >= 95
    assert all(getattr(e, "iteration", 0) <= prefix.run_end.iterations for e in prefix.events)
    whole = at_budget(trace, trace.run_start.budget)
    assert summarize(whole).metric_calls == summarize(trace).metric_calls


def test_a_run_is_not_read_past_what_it_spent_nor_when_resumed(tmp_path):
    trace = simulated_trace(tmp_path, searched({"seed_score": 0.3}), Shape(1, 1))
    spent = summarize(trace).metric_calls
    with pytest.raises(ValueError, match=f"spent {spent} metric calls"):
        at_budget(trace, spent + 1)
    resumed = dataclasses.replace(
        trace,
        events=[*trace.events[:-1], Resume(start=1.0, end=1.0, iteration=1, metric_calls=26)],
    )
    with pytest.raises(ValueError, match="resumed"):
        at_budget(resumed, 95)


QUALITY_RUNS = STUDY / "quality" / "runs"
RECORDED_RUNS = ROOT / "experiments" / "recorded_quality" / "runs"


@pytest.mark.parametrize("pair", [("1x1", 8), ("2x2", 0), ("4x4", 4)], ids=str)
def test_a_real_run_read_at_a_budget_is_the_real_run_given_it(pair):
    shape, seed = pair
    path = QUALITY_RUNS / f"{shape}-b4000-s{seed}" / "trace.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is not recorded")
    longer = read_trace(path)
    shorter = read_trace(RECORDED_RUNS / f"{shape}-s{seed}" / "trace.jsonl")
    assert prefix_differences(longer, shorter) == []
    # and a run of another seed is told apart
    other = read_trace(RECORDED_RUNS / f"{shape}-s{seed + 1}" / "trace.jsonl")
    assert prefix_differences(longer, other) != []


def reading(run: str, shape: str, budget: int, score: float) -> Reading:
    return Reading(run, "test", shape, 0, budget, score, budget, 1.0)


def test_readings_against_a_curve_count_coverage_and_the_paired_gain():
    readings = [
        reading("a", "1x1", 100, 0.50),
        reading("a", "1x1", 800, 0.70),
        reading("b", "1x1", 100, 0.40),
        reading("b", "1x1", 800, 0.90),  # above the interval at 800
        reading("c", "2x2", 100, 0.45),  # on the interval's end: inside, not strictly
    ]
    predicted = {
        ("single", 100): Interval(0.45, 0.30, 0.60),
        ("single", 800): Interval(0.72, 0.55, 0.85),
        ("2x2", 100): Interval(0.50, 0.45, 0.60),
    }
    rows = {(r.shape, r.budget): r for r in score_rows(readings, predicted)}
    single = rows["1x1", 800]
    assert (single.runs, single.inside, single.strictly_inside) == (2, 1, 1)
    assert single.measured_mean == pytest.approx(0.80)
    assert single.error == pytest.approx(0.72 - 0.80)
    assert (rows["2x2", 100].inside, rows["2x2", 100].strictly_inside) == (1, 0)
    assert math.isnan(rows["2x2", 100].measured_sd)
    (gain,) = gain_rows(readings, predicted, {"single": Interval(0.27, 0.0, 0.40)}, 100, 800)
    assert gain.runs == 2  # c was never read at 800
    assert gain.measured_mean == pytest.approx((0.20 + 0.50) / 2)
    assert gain.predicted_mean == pytest.approx(0.72 - 0.45)
    assert gain.measured_se == pytest.approx(0.3 / math.sqrt(2) / math.sqrt(2))
    assert gain.inside == 1


def test_a_curve_is_read_at_a_wall_clock_between_its_budgets():
    from presets import Point, at_wall_clock

    curve = [
        Point(1000, 100.0, 0.50, 0.4, 0.6, 0.55),
        Point(2000, 200.0, 0.60, 0.5, 0.7, 0.65),
        Point(4000, 400.0, 0.64, 0.5, 0.8, 0.70),
    ]
    assert at_wall_clock(curve, 50.0).budget == 1000  # before the first: read at it
    halfway = at_wall_clock(curve, 100.0 * math.sqrt(2))  # halfway in log wall-clock
    assert halfway.budget == pytest.approx(1000 * math.sqrt(2))
    assert halfway.test == pytest.approx(0.55)
    assert halfway.best == pytest.approx(0.60)
    assert at_wall_clock(curve, 400.0).test == pytest.approx(0.64)
    assert at_wall_clock(curve, 401.0).test is None  # past the curve


def test_only_the_complete_rounds_of_held_out_runs_are_read(tmp_path):
    """A round cut short by the time, and any round after it, are left out whole."""
    import evidence

    arm = dataclasses.replace(evidence.LM, name=str(tmp_path))  # its folder: tmp_path

    def made(*cells):
        for shape, seed in cells:
            run = tmp_path / "runs" / f"{shape}-b320-s{seed}"
            run.mkdir(parents=True)
            (run / "result.json").write_text("{}")

    assert evidence.complete_rounds(arm) == []
    made(("1x1", 8), ("2x2", 0), ("4x1", 0), ("1x1", 9), ("2x2", 1))
    assert evidence.complete_rounds(arm) == [("1x1", 8), ("2x2", 0), ("4x1", 0)]
    made(("1x1", 10), ("2x2", 2), ("4x1", 2))  # round 3 whole, round 2 still short
    assert len(evidence.complete_rounds(arm)) == 3
    made(("4x1", 1))
    assert evidence.complete_rounds(arm) == [
        ("1x1", 8), ("2x2", 0), ("4x1", 0), ("1x1", 9), ("2x2", 1), ("4x1", 1),
        ("1x1", 10), ("2x2", 2), ("4x1", 2),
    ]  # fmt: skip
