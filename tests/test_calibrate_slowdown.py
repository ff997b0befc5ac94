"""A local LM pool: lm_servers from the traces or the flag, and the load slowdown fitted.

The round trip simulates a pool of 2 servers with beta = 0.5 (rollouts are
always served two at a time there, so single runs alone cannot tell beta from
the rollout latency; two 2x2 runs add reflections served two at a time). With
about 350 reflections at each load and a lognormal sigma of 0.3, log(1 + beta)
is known to about +-0.05, so beta to about +-0.1: the tolerance is 0.15.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import TRUE, relative, write_traces
from conftest import assert_user_error, run_pxn
from sim_helpers import with_local_pool

from pxn.calibrate.traces.overhead import call_loads
from pxn.calibrate.traces.pipeline import Calibration, calibrate_traces
from pxn.calibrate.traces.slowdown import fit_model_slowdowns, fit_slowdown, refit_beta
from pxn.load import Load, Loads
from pxn.shape import Shape
from pxn.sim.predict import sweep
from pxn.trace import Reflection, Rollout

# Calibration round trips on simulated traces: seconds each, so outside `make quick`.
pytestmark = pytest.mark.slow

POOL = with_local_pool(TRUE, 2, 0.5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("pool")
    return write_traces(root, POOL, Shape(1, 1), range(2)) + write_traces(
        root, POOL, Shape(2, 2), range(2)
    )


@pytest.fixture(scope="module")
def calibration(runs: list[Path]) -> Calibration:
    return calibrate_traces(runs)


def test_the_slowdown_and_the_pool_are_recovered(calibration: Calibration) -> None:
    task, reflection = calibration.slowdowns["task"], calibration.slowdowns["reflection"]
    loads = calibration.scenario.loads
    assert loads.task.servers == loads.reflection.servers == 2  # from the run_start's meta
    assert calibration.lm_servers_source == "from the traces' run_start"
    # Reflections ran alone and two at a time: their own calls tell their slowdown.
    assert reflection.basis == "own" and reflection.fit.loads["reflection"].keys() == {1, 2}
    assert reflection.fit.pvalue < 1e-6
    assert abs(loads.reflection.slowdown - 0.5) < 0.15
    assert reflection.fit.interval[0] < 0.5 < reflection.fit.interval[1]
    # Rollouts always ran two at a time: the task model borrows the shared pool's fit.
    assert task.basis == "pool" and task.fit.loads["rollout"].keys() == {2}
    assert abs(loads.task.slowdown - 0.5) < 0.15
    # The latency fits see each call as served alone: the truth's distributions.
    assert relative(calibration.scenario.rollout.mean(), POOL.rollout.mean()) < 0.03
    assert relative(calibration.scenario.reflection.mean(), POOL.reflection.mean()) < 0.08


def test_the_recovered_pool_predicts_the_same_wall_clock(calibration: Calibration) -> None:
    shapes = [Shape(1, 1), Shape(2, 2), Shape(4, 1)]
    truth = sweep(POOL, shapes, replicates=40)
    predicted = sweep(calibration.scenario.replace(seed=POOL.seed + 1), shapes, replicates=40)
    for t, p in zip(truth, predicted, strict=True):
        assert relative(p.wall_clock.mean, t.wall_clock.mean) < 0.05, t.shape


def test_single_runs_on_a_full_pool_cannot_tell_the_slowdown(tmp_path: Path) -> None:
    """Every rollout served two at a time, every reflection alone: beta is kept 0, and said so."""
    cal = calibrate_traces(write_traces(tmp_path, POOL, Shape(1, 1), range(1)))
    for role in ("task", "reflection"):
        assert not cal.slowdowns[role].fit.identified
        assert cal.scenario.loads.of(role).slowdown == 0.0
        assert "not identifiable" in cal.slowdowns[role].fit.reason


def test_single_runs_at_one_and_two_workers_do_tell_it(tmp_path: Path) -> None:
    """The remedy: a W = 1 single run serves rollouts alone, a W = 2 one two at a time."""
    runs = write_traces(tmp_path / "w2", POOL.replace(workers=2), Shape(1, 1), range(1))
    runs += write_traces(tmp_path / "w1", POOL.replace(workers=1), Shape(1, 1), range(1, 2))
    cal = calibrate_traces(runs)
    task = cal.slowdowns["task"]
    assert task.basis == "own"  # within each phase, rollouts ran alone and two at a time
    assert all(by_load.keys() == {1, 2} for by_load in task.fit.loads.values())
    assert abs(cal.scenario.loads.task.slowdown - 0.5) < 0.1
    assert cal.scenario.workers == 2  # the first trace's setup, with a note on the other
    assert any("traces differ in workers" in note for note in cal.notes)


def test_no_slowdown_is_kept_at_zero_with_an_interval_around_it() -> None:
    rng = np.random.default_rng(3)
    loads = rng.integers(1, 5, size=400)
    latencies = rng.lognormal(0.0, 0.5, size=400)
    fit = fit_slowdown(np.array(["rollout"] * 400), loads, latencies, None)
    assert fit.identified and fit.chosen == 0.0
    assert fit.interval[0] < 0 < fit.interval[1]
    assert fit.pvalue > 0.01


def test_calls_beyond_the_servers_are_set_aside() -> None:
    """Latency x (1 + 0.8 (m - 1)) up to 2 servers; calls at load 3 and 4 also queued."""
    rng = np.random.default_rng(5)
    loads = np.repeat([1, 2, 3, 4], 150)
    latencies = rng.lognormal(0.0, 0.3, size=600) * (1 + 0.8 * (np.minimum(loads, 2) - 1))
    latencies[loads > 2] *= 2.5  # the wait for a server
    fit = fit_slowdown(np.array(["rollout"] * 600), loads, latencies, servers=2)
    assert fit.set_aside == 300 and fit.n == 300
    assert fit.chosen == pytest.approx(0.8, abs=0.15)


def test_calls_dispatched_together_count_each_other() -> None:
    """A stage's calls start milliseconds apart in a real trace; a freed slot is no extra load."""

    def call(start: float, end: float) -> Rollout:
        return Rollout(
            start=start, end=end, iteration=1, phase="full_val", worker=0, candidate="0", example=""
        )

    calls = [call(0.0, 3.0), call(0.008, 1.0), call(1.0, 2.5), call(2.52, 2.6)]
    assert call_loads(calls).tolist() == [2, 2, 2, 2]
    reflections = [Reflection(start=5.0 + i / 1000, end=9.0, iteration=1, slot=i, proposal="p",
                              parent="0") for i in range(3)]  # fmt: skip
    assert call_loads(reflections).tolist() == [3, 3, 3]


def test_the_flag_sets_the_pool_and_the_report_names_it(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "pool.toml"
    result = run_pxn("calibrate", *runs, "--lm-servers", "3", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "lm_servers=3 (as given)" in result.stdout
    assert "load slowdown: beta=" in result.stdout
    assert "the traces declare lm_servers [2]; 3 as given overrides it" in result.stdout
    text = out.read_text()
    assert tomllib.loads(text)["load"]["task"]["servers"] == 3
    assert "#   load slowdown: beta=" in text
    bad = run_pxn("calibrate", *runs, "--lm-servers", "0", "-o", out)
    assert bad.returncode == 2 and "--lm-servers must be >= 1" in bad.stderr


def test_a_bad_declared_pool_is_one_clear_line(runs: list[Path], tmp_path: Path) -> None:
    lines = (runs[0] / "trace.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace('"lm_servers": 2', '"lm_servers": "two"')
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "trace.jsonl").write_text("\n".join(lines) + "\n")
    assert_user_error(
        run_pxn("calibrate", bad, "-o", tmp_path / "x.toml"), "lm_servers is 'two'", "whole number"
    )


def test_a_hosted_api_slowdown_is_fitted_per_model(tmp_path: Path) -> None:
    """No server limit: rollouts slow by 0.3 per extra call, reflections by 0.6. 2x2 runs put
    child minibatches at loads 3 to 8 (skips thin them) and reflections at 1 to 4, so each
    model's own calls, phase by phase, tell its slowdown. Only the ~500 child-minibatch
    rollouts below load 8 inform the task's: its 95% interval is about +-0.15 wide, the
    reflections' +-0.1; the tolerances are those, and the intervals must hold the truth."""
    hosted = TRUE.replace(loads=Loads(Load(None, 0.3), Load(None, 0.6)), skip_perfect=0.3)
    cal = calibrate_traces(write_traces(tmp_path, hosted, Shape(2, 2), range(4)))
    task, reflection = cal.slowdowns["task"], cal.slowdowns["reflection"]
    loads = cal.scenario.loads
    assert loads.task.servers is None and cal.servers is None
    assert task.basis == reflection.basis == "own"
    assert task.fit.pvalue < 1e-6 and reflection.fit.pvalue < 1e-6
    assert abs(loads.task.slowdown - 0.3) < 0.15 and abs(loads.reflection.slowdown - 0.6) < 0.1
    assert task.fit.interval[0] < 0.3 < task.fit.interval[1]
    assert reflection.fit.interval[0] < 0.6 < reflection.fit.interval[1]
    # Where most rollouts ran (8 in flight) the fit reproduces their latency, whatever
    # share of it the slowdown takes.
    at_eight = cal.scenario.rollout.mean() * loads.task.factor(8)
    assert relative(at_eight, hosted.rollout.mean() * hosted.loads.task.factor(8)) < 0.03


def test_beta_is_not_refitted_where_each_group_ran_at_a_load_of_its_own() -> None:
    """Rollouts all two at a time, reflections all alone: the loads differ only as the groups'
    own lengths do, and any beta fits equally badly."""
    rng = np.random.default_rng(11)
    groups = np.array(["rollout"] * 300 + ["reflection"] * 30)
    loads = np.array([2] * 300 + [1] * 30)
    latencies = np.concatenate([rng.lognormal(-0.5, 0.2, 300), rng.lognormal(1.0, 0.15, 30)])
    assert refit_beta(groups, loads, latencies, servers=2) is None


def test_the_bootstrap_keeps_the_calibration_design(tmp_path: Path) -> None:
    """Singles at W = 1 and at W = 2, two of each: every draw resamples runs within W, so no
    draw sees only the W = 2 runs (where the slowdown is not identified) and every draw's
    slowdown stays near the point fit's interval."""
    runs = write_traces(tmp_path / "w1", POOL.replace(workers=1), Shape(1, 1), range(2))
    runs += write_traces(tmp_path / "w2", POOL.replace(workers=2), Shape(1, 1), range(2, 4))
    cal = calibrate_traces(runs, draws=60)
    units, rng = cal.units, np.random.default_rng(0)
    for _ in range(50):  # across designs, 1 in 8 resamples would hold one design only
        drawn = units.resample(rng)
        assert {units.design[r] for r in drawn.run} == set(units.design)
    for role in ("task", "reflection"):
        upper = cal.slowdowns[role].fit.interval[1]
        values = [d[f"load.{role}.slowdown"] for d in cal.scenario.uncertainty.draws]
        assert max(values) < 3 * upper, role


def pool_calls(reflections_at_two: int, reflection_beta: float, seed: int = 9):
    """Rollouts at loads 1 and 2 slowed by 0.5; 200 reflections alone and some at load 2."""
    rng = np.random.default_rng(seed)
    rollout_loads = np.repeat([1, 2], 400)
    reflection_loads = np.repeat([1, 2], [200, reflections_at_two])
    slowed = 1 + reflection_beta * (reflection_loads - 1)
    latencies = np.concatenate([
        rng.lognormal(0.0, 0.3, 800) * (1 + 0.5 * (rollout_loads - 1)),
        rng.lognormal(1.0, 0.3, len(reflection_loads)) * slowed,
    ])  # fmt: skip
    kind = np.array(["rollout"] * 800 + ["reflection"] * len(reflection_loads))
    return kind, kind.copy(), np.concatenate([rollout_loads, reflection_loads]), latencies


def test_a_few_reflections_at_two_loads_borrow_the_pools_slowdown() -> None:
    """Four reflections at load 2 cannot test a slowdown of their own: on a shared pool the
    fit of both models' calls stands in, as when every reflection ran alone."""
    fits = fit_model_slowdowns(*pool_calls(4, 0.5), servers=2)
    reflection = fits["reflection"]
    assert reflection.basis == "pool"
    assert reflection.chosen == pytest.approx(0.5, abs=0.1)
    alone = fit_model_slowdowns(*pool_calls(4, 0.5), servers=None)["reflection"]
    assert alone.basis == "own" and alone.chosen == 0.0  # no known pool: nothing to borrow


def test_reflections_that_show_their_own_slowdown_keep_it() -> None:
    fits = fit_model_slowdowns(*pool_calls(200, 1.2), servers=2)
    assert fits["reflection"].basis == "own"
    assert fits["reflection"].chosen == pytest.approx(1.2, abs=0.15)
