"""Learning curves: each shape at several budgets from one run a replicate, the paired gain
of each budget over the previous, and the knee; through the API and `pxn sweep --budgets`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, run_pxn
from sim_helpers import make_scenario, searched

from pxn.api import simulate, sweep
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.curves import CurvePoint, knee_of, noise_of, sweep_curves
from pxn.sim.model import simulate_once
from pxn.sim.predict import Interval
from pxn.sim.predict import sweep as sweep_at

CLIMBING = searched({"seed_score": 0.3, "eval_noise": 0.1}, budget=600)
NAMES = {150: "150", 300: "300", 600: "600"}
SHAPES = [Shape(1, 1), Shape(2, 2)]


def bits(value) -> str:
    return repr(dataclasses.asdict(value))


def test_each_budgets_predictions_are_a_sweep_at_that_budget_alone() -> None:
    curves = sweep_curves(CLIMBING, SHAPES, 12, NAMES)
    for i, budget in enumerate(NAMES):
        alone = sweep_at(CLIMBING.replace(budget=budget), SHAPES, 12)
        assert [bits(c.points[i].prediction) for c in curves] == [bits(p) for p in alone]


def test_the_gain_is_each_runs_own_from_one_budget_to_the_next() -> None:
    [curve] = sweep_curves(CLIMBING, [Shape(2, 1)], 10, NAMES)
    for i, (before, after) in enumerate([(150, 300), (300, 600)], start=1):
        gains = [
            simulate_once(CLIMBING.replace(budget=after), Shape(2, 1), r).test_score
            - simulate_once(CLIMBING.replace(budget=before), Shape(2, 1), r).test_score
            for r in range(10)
        ]
        assert curve.points[i].test_gain == Interval.of(gains)
    assert curve.points[0].test_gain is None
    scores = [p.prediction.test_score.mean for p in curve.points]
    assert scores == sorted(scores)  # this search climbs with the budget


class Figures:
    """What knee_of reads of a point's prediction: the test score, wall-clock and dollars."""

    def __init__(self, score: float):
        self.test_score = Interval(score, score, score)
        self.wall_clock = Interval(60.0, 50.0, 70.0)
        self.dollars = None


def curve(scores: dict[int, float], noise: float = 0.03) -> list[CurvePoint]:
    return [CurvePoint(b, str(b), Figures(s), test_noise=noise) for b, s in scores.items()]


def test_the_knee_is_where_a_doubling_adds_less_than_the_noise() -> None:
    knee = knee_of(curve({1000: 0.50, 2000: 0.56, 4000: 0.58, 8000: 0.59}))
    assert knee.budget == 2000 and knee.gain_per_doubling == pytest.approx(0.02)
    assert (knee.noise, knee.wall_clock) == (0.03, Interval(60.0, 50.0, 70.0))
    # Every doubling the curve holds still pays: no knee (4000 has no double asked).
    assert knee_of(curve({1000: 0.50, 2000: 0.56, 4000: 0.60})) is None
    # Between 2000 and 8000 the score is read on a line in log2 B: 4000 is halfway.
    assert knee_of(curve({1000: 0.50, 2000: 0.56, 8000: 0.60})).budget == 2000


def test_a_budget_beside_another_is_no_doubling_of_its_own() -> None:
    """1010 beside 1000 (a DSPy level beside a round number) adds nothing, yet doubling
    1000 or 1010 adds 0.06: no knee there."""
    assert knee_of(curve({1000: 0.50, 1010: 0.50, 2000: 0.56, 4000: 0.60})) is None
    assert knee_of(curve({1000: 0.50, 1010: 0.50, 2000: 0.56, 4000: 0.58})).budget == 2000


def test_run_to_run_noise_leaves_the_parameters_spread_out() -> None:
    # Replicate r runs draw r mod 3: draws far apart, each draw's runs 0.01 apart.
    values = [d + e for e in (0.0, 0.01, 0.02, 0.03) for d in (0.1, 0.5, 0.9)]
    assert noise_of(values, 3) == pytest.approx(np.std([0.0, 0.01, 0.02, 0.03], ddof=1))
    assert noise_of(values, 0) == pytest.approx(np.std(values, ddof=1))
    assert noise_of(values[:3], 3) == pytest.approx(np.std(values[:3], ddof=1))  # no repeats


# -- the API and the command ------------------------------------------------------------


def test_the_apis_sweep_draws_and_reports_the_curves(tmp_path: Path) -> None:
    result = sweep(CLIMBING, shapes="single,2x2", budgets="150..600", reps=10, jobs=1,
                   deadline="30m")  # fmt: skip
    assert [c.shape.label for c in result.curves] == ["single", "2x2"]
    assert [p.budget for p in result.curves[0].points] == [150, 300, 600]
    assert result.scenario.budget == 600
    assert [p.shape for p in result.predictions] == SHAPES  # at the largest budget
    assert len(result.rows()) == 6
    text = str(result)
    assert "learning curves, B = 150, 300, 600 metric calls" in text and "knee" in text
    report = result.report()
    assert [row["budget"] for row in report.rows] == [150, 300, 600] * 2
    assert report.rows[1]["test_gain_mean"] == result.curves[0].points[1].test_gain.mean
    assert report.document["curves"][1]["points"][2]["budget"] == 600
    assert set(result.figures()) == {"sweep.png", "progress.png", "curves.png"}


def test_the_command_writes_the_curves_figure(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    CLIMBING.save(path)
    out = tmp_path / "o"
    ran = run_pxn("sweep", path, "--budgets", "150,300,600", "--shapes", "single,2x2",
                  "--reps", "8", "--max-dollars", "5", "--out", out)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = (out / "sweep.csv").read_text().splitlines()[0]
    assert header.startswith("shape,budget,budget_given,p,n,k,replicates")
    assert json.loads((out / "sweep.json").read_text())["budgets"] == {
        "150": "150", "300": "300", "600": "600",
    }  # fmt: skip


def test_without_scores_a_curve_has_time_and_dollars_and_no_knee() -> None:
    rates = make_scenario(budget=400)
    result = sweep(rates, shapes="single", budgets="100,400", reps=4, jobs=1)
    assert result.curves[0].knee is None and result.curves[0].points[1].test_gain is None
    assert "no [quality] model" in str(result)
    assert set(result.figures()) == {"sweep.png"}


def test_a_dspy_scenarios_curve_holds_dspys_levels(tmp_path: Path) -> None:
    data = CLIMBING.to_dict() | {"optimizer": "dspy.GEPA", "reflection_concurrency": 1}
    scenario = Scenario.from_dict(data | {"budget": "auto:light", "valset_size": 20})
    result = sweep(scenario, shapes="single", budgets="400,1200", reps=3, jobs=1)
    # V=20, one predictor: DSPy's light, medium and heavy are 460, 790 and 1175 calls.
    given = [(p.budget, p.given) for p in result.curves[0].points]
    assert given == [(400, "400"), (460, "auto:light"), (790, "auto:medium"),
                     (1175, "auto:heavy"), (1200, "1200")]  # fmt: skip
    assert "1175 (auto:heavy)" in str(result)


def test_simulate_and_sweep_take_the_minibatch() -> None:
    assert simulate(CLIMBING, reps=2, minibatch=2).scenario.minibatch == 2
    swept = sweep(CLIMBING, shapes="2x2", reps=2, jobs=1, minibatch=5, budgets="300,600")
    assert swept.scenario.minibatch == 5
    ran = run_pxn("simulate", "hover", "--minibatch", "4", "--reps", "2", "--format", "json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["scenario"]["minibatch"] == 4


def test_a_budget_too_small_to_search_is_warned_of(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    CLIMBING.save(path)
    ran = run_pxn("simulate", path, "--budget", "25", "--reps", "2")
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.splitlines()[0].startswith(
        "pxn: warning: B=25 affords at most 1 proposal after the seed's validation (V=20"
    )
    assert "3 proposals need B >= 33" in ran.stdout
    quiet = run_pxn("simulate", path, "--budget", "25", "--reps", "2", "--min-proposals", "1")
    assert "warning" not in quiet.stderr + quiet.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["--budget", "300", "--budgets", "300,600"],
            "--budgets give one budget, or a curve's budgets, not both",
        ),
        (["--budgets", "600..150"], "--budgets '600..150' runs from a larger budget"),
        (["--budgets", "150,600", "--deadline", "0s"], "--deadline must be longer than zero"),
        (["--budgets", "150,600", "--max-dollars", "0"], "--max-dollars must be positive"),
        (["--minibatch", "999"], "--minibatch 999 is larger than the trainset"),
    ],
)
def test_bad_curves_are_one_line(tmp_path: Path, args, fragment) -> None:
    path = tmp_path / "q.toml"
    CLIMBING.save(path)
    assert_user_error(run_pxn("sweep", path, "--reps", "2", *args), fragment)
