"""Validation: measured runs against predictions for their own setup; errors, coverage and
whether the intervals are honest (each run's percentile within its prediction)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import TRUE, write_traces
from conftest import run_pxn
from sim_helpers import with_local_pool

from pxn.api.checks_report import validation_report
from pxn.api.report import csv_text, json_text
from pxn.api.tables import Grid
from pxn.calibrate.traces.overhead import fit_overhead
from pxn.checks.validate import Honesty, ScenarioValidation, validate_runs
from pxn.run_summary import summarize
from pxn.scenario import Uncertainty
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.sim.predict import sweep
from pxn.trace_reading import read_one, read_trace

SMALL = TRUE.replace(budget=800)
SHAPES = (Shape(1, 1), Shape(2, 2), Shape(4, 1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two 'measured' runs per shape, drawn from the truth with seeds the predictions never use."""
    root = tmp_path_factory.mktemp("measured")
    measured = SMALL.replace(seed=999)
    return [path for shape in SHAPES for path in write_traces(root, measured, shape, range(2))]


@pytest.fixture(scope="module")
def validation(runs: list[Path]) -> ScenarioValidation:
    return validate_runs(SMALL, runs, replicates=100)


def test_each_run_is_set_beside_its_own_prediction(
    runs: list[Path], validation: ScenarioValidation
) -> None:
    assert [c.run for c in validation.checks] == [str(r / "trace.jsonl") for r in runs]
    for check in validation.checks:
        assert check.shape == Shape.parse(read_trace(check.run).run_start.shape)
        assert check.measured == summarize(read_trace(check.run))
        wall = check.predicted.wall_clock
        assert wall.low <= wall.mean <= wall.high
        assert check.after_loop == 0  # a simulated run ends with its last iteration
        assert check.sim_error == pytest.approx(wall.mean / check.measured.wall_clock - 1)
        assert check.inside == (wall.low <= check.measured.wall_clock <= wall.high)


def test_time_after_gepa_loop_is_shown_apart_not_scored(runs: list[Path], tmp_path: Path) -> None:
    """The runner scores a test set after gepa returns; the simulator does not model that."""
    lines = (runs[0] / "trace.jsonl").read_text().splitlines()
    end = json.loads(lines[-1])
    assert end["kind"] == "run_end"
    end["start"] = end["end"] = end["end"] + 30.0
    epilogue = tmp_path / "trace.jsonl"
    epilogue.write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    [plain, later] = validate_runs(SMALL, [runs[0], epilogue], replicates=10).checks
    assert later.wall_clock == plain.wall_clock
    assert later.after_loop == pytest.approx(30.0)
    assert later.sim_error == pytest.approx(plain.sim_error)
    overhead = fit_overhead([read_one(epilogue)])
    assert overhead.after_loop == pytest.approx(30.0)
    assert overhead.per_stage == pytest.approx(SMALL.stage_overhead, rel=1e-6)


def test_the_true_model_scores_well(validation: ScenarioValidation) -> None:
    """Runs drawn from the scenario itself: small errors, and mostly inside the 5-95% band."""
    inside, counted = validation.coverage
    assert counted == 6
    assert inside >= 4  # 90% intervals: 3 or fewer of 6 inside happens 1.6% of the time
    assert validation.sim_mape < 0.08
    # The closed form ignores stragglers and skips, so it is allowed to be worse, not better.
    assert validation.analytic_mape > validation.sim_mape


def test_a_run_is_predicted_at_its_own_worker_count(tmp_path: Path) -> None:
    [run] = write_traces(tmp_path, SMALL.replace(workers=2), Shape(2, 2), range(1))
    [check] = validate_runs(SMALL, [run], replicates=20).checks
    [expected] = sweep(SMALL.replace(workers=2), [Shape(2, 2)], 20)
    assert check.predicted.wall_clock == expected.wall_clock
    [at_eight] = sweep(SMALL, [Shape(2, 2)], 20)
    assert check.predicted.wall_clock.mean > 1.5 * at_eight.wall_clock.mean


def test_a_run_is_predicted_on_its_own_lm_pool(tmp_path: Path) -> None:
    """A run that declares lm_servers in its run_start is predicted with that pool."""
    [run] = write_traces(tmp_path, with_local_pool(SMALL, 2), Shape(2, 2), range(1))
    [check] = validate_runs(SMALL, [run], replicates=20).checks
    assert check.measured_setup["lm_servers"] == 2
    [expected] = sweep(with_local_pool(SMALL, 2), [Shape(2, 2)], 20)
    assert check.predicted.wall_clock == expected.wall_clock


def test_an_interrupted_run_is_shown_but_not_scored(runs: list[Path], tmp_path: Path) -> None:
    lines = (runs[0] / "trace.jsonl").read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    result = validate_runs(SMALL, [runs[1], cut], replicates=20)
    assert [c.complete for c in result.checks] == [True, False]
    assert result.coverage[1] == 1
    assert result.sim_mape == pytest.approx(abs(result.checks[0].sim_error))


def test_csv_json_and_table(validation: ScenarioValidation) -> None:
    report = validation_report(validation)
    rows = list(csv.DictReader(io.StringIO(csv_text(report.rows))))
    assert len(rows) == 6
    assert {"measured_wall_clock_s", "sim_wall_clock_p5_s", "analytic_error"} <= set(rows[0])
    document = json.loads(json_text(report.document))
    assert document["summary"]["completed_runs"] == 6
    assert document["summary"]["sim_mape"] == pytest.approx(validation.sim_mape)
    assert len(document["runs"]) == 6
    [table] = [block for block in report.shown if isinstance(block, Grid)]
    assert len(table.rows) == 6


def test_cli_validate_writes_its_outputs(runs: list[Path], tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    SMALL.save(scenario)
    out = tmp_path / "out"
    args = ("validate", *runs[:2], "--scenario", scenario, "--reps", "10", "--jobs", "1")
    result = run_pxn(*args, "--format", "json", "--out", out)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["runs"] == 2
    assert "simulator MAPE" in result.stderr
    assert {p.name for p in out.iterdir()} == {
        "validation.csv",
        "validation.json",
        "sweep_vs_measured.png",
    }
    bad = run_pxn("validate", *runs[:1], "--scenario", scenario, "--format", "xml")
    assert bad.returncode == 2 and "--format is table, csv or json" in bad.stderr


def test_each_run_has_its_percentile_within_its_own_prediction(
    validation: ScenarioValidation,
) -> None:
    for check in validation.checks:
        # The prediction's replicates again, straight from the simulator.
        walls = np.array([simulate_once(SMALL, check.shape, r).wall_clock for r in range(100)])
        below = np.sum(walls < check.wall_clock) + np.sum(walls == check.wall_clock) / 2
        assert check.percentile == below / 100
        if check.inside:  # inside the 5-95% interval: between its percentiles, give or take one
            assert 0.04 <= check.percentile <= 0.96


def test_the_true_model_is_judged_honest(validation: ScenarioValidation) -> None:
    honesty = validation.honesty
    assert (honesty.runs, honesty.inside) == (6, validation.coverage[0])
    assert honesty.expected_inside == pytest.approx(5.4)
    assert not honesty.too_narrow and not honesty.too_wide and honesty.biased is None
    assert honesty.verdict.startswith("consistent with honest intervals")
    assert "6 run(s) can reveal only gross errors" in honesty.verdict


def test_a_model_too_fast_is_judged_biased_and_too_narrow(tmp_path: Path) -> None:
    """Runs whose rollouts take twice as long as the scenario says: all past its intervals."""
    slow = SMALL.with_parameters({"rollout.scale": 2 * SMALL.rollout.params["scale"]})
    measured = slow.replace(seed=999)
    runs = [p for shape in SHAPES for p in write_traces(tmp_path, measured, shape, range(2))]
    honesty = validate_runs(SMALL, runs, replicates=40).honesty
    # Six runs all outside a 90% interval: p = 1e-6; all at percentile 1: z = 4.2.
    assert honesty.inside == 0 and honesty.too_narrow and honesty.coverage_p < 1e-4
    assert honesty.biased == "slower" and honesty.mean_percentile == 1.0
    assert honesty.verdict.startswith("intervals not honest: too narrow and runs slower")


def test_the_true_acceptance_is_consistent_with_the_runs(validation: ScenarioValidation) -> None:
    check = validation.acceptance
    runs = [read_one(Path(c.run)) for c in validation.counted]
    assert check.proposals == sum(summarize(t).proposals for t in runs)
    assert check.accepted == sum(summarize(t).accepted for t in runs)
    assert check.p_value >= 0.05 and check.verdict.endswith(f"consistent (p = {check.p_value:.2g})")


def test_runs_accepting_less_than_the_scenario_are_told_apart(tmp_path: Path) -> None:
    """Runs accepting 10% of proposals against a scenario's 25%: their iterations, full
    validations and wall-clock follow, and the report says why."""
    measured = SMALL.replace(seed=999, acceptance=dataclasses.replace(SMALL.acceptance, a0=0.1))
    runs = [p for shape in SHAPES for p in write_traces(tmp_path, measured, shape, range(2))]
    check = validate_runs(SMALL, runs, replicates=40).acceptance
    assert check.z < -3 and check.p_value < 1e-3
    assert check.accepted < 0.6 * check.expected
    assert "binomial standard errors fewer" in check.verdict


def test_runs_accepting_what_the_scenario_never_does_are_told_apart(runs: list[Path]) -> None:
    never = SMALL.replace(acceptance=dataclasses.replace(SMALL.acceptance, a0=0.0))
    check = validate_runs(never, runs, replicates=20).acceptance
    assert check.expected == 0 and check.accepted > 0
    assert check.p_value == 0 and "impossibly more" in check.verdict


def test_predictions_use_the_scenarios_draws(runs: list[Path]) -> None:
    scale = SMALL.rollout.params["scale"]
    draws = tuple({"rollout.scale": scale * f} for f in (0.5, 1.0, 2.0))
    uncertain = SMALL.replace(uncertainty=Uncertainty("test", draws))
    [check] = validate_runs(uncertain, runs[2:3], replicates=30).checks
    [expected] = sweep(uncertain, [check.shape], 30)
    assert check.predicted == expected
    assert check.predicted.draws == 3 and check.predicted.wall_clock_split is not None


def test_no_completed_run_gives_an_honesty_without_figures() -> None:
    honesty = Honesty.of([], 0)
    assert honesty.coverage_p is None and honesty.mean_percentile is None
    assert honesty.verdict == "no completed run to judge the intervals by"
    json.dumps(dataclasses.asdict(honesty), allow_nan=False)  # valid JSON: null, never NaN
