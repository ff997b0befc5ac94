"""`pxn conformance`: synthetic work for the real gepa, and the verdict against the simulator.

The quick tests check the parts: the time scale, what synthetic work refuses,
that the synthetic reflection model realises the scenario's acceptance, that
a model's servers bound its calls, and that the verdict's statistics pass a
right simulator and flag a wrong one (simulated traces stand for real runs).
The slow test runs the real gepa 0.1.4 on synthetic work end to end.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from conftest import assert_user_error, run_pxn
from sim_helpers import lognormal

from pxn.acceptance import Acceptance
from pxn.checks.conformance import (
    DEFAULT_SCENARIO,
    at_time_scale,
    dispatch,
    engine_overhead,
    judge,
    scaled,
)
from pxn.checks.synthetic import (
    RunGrid,
    SleepingModel,
    SyntheticReflectionModel,
    candidate_text,
    check_realisable,
    run_grid,
)
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.load import Load, Loads
from pxn.rate_limits import RateLimit, RateLimits
from pxn.runner.lm import CallSite
from pxn.runner.recording.totals import trace_totals
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import Rollout, TraceWriter
from pxn.trace_reading import read_trace

INSTANT = Distribution("empirical", samples=(0.0,))  # a call that takes no time


def small(**changes) -> Scenario:
    """A workload whose real runs take about a second at time scale 0.01."""
    base = dict(
        name="small",
        budget=80,
        valset_size=6,
        trainset_size=12,
        workers=4,
        minibatch=2,
        reflection_concurrency=4,
        rollout=lognormal(1.0, 0.5),
        reflection=lognormal(3.0, 0.4),
        acceptance=Acceptance(0.3),
    )
    return Scenario(**(base | changes)).validate()


# ---- the time scale -------------------------------------------------------


@pytest.mark.parametrize(
    "distribution",
    [
        Distribution("lognorm", {"s": 0.6, "scale": 3.0}),
        Distribution("gamma", {"a": 2.0, "loc": 0.5, "scale": 1.5}),
        Distribution("expon", {}),  # scipy's default scale of 1
        Distribution("empirical", samples=(1.0, 2.5, 7.0), params={"scale": 2.0}),
        Distribution("lognorm", {"s": 1.0, "scale": 2.0}, cap=5.0, cap_retries=1),
    ],
    ids=["lognorm", "gamma-loc", "expon-default", "empirical", "capped"],
)
def test_a_scaled_distribution_draws_the_factor_times_the_draws(distribution) -> None:
    factor = 0.01
    mine = scaled(distribution, factor)
    mine.validate("scaled")
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert np.allclose(mine.sample(a, 500), factor * distribution.sample(b, 500))
    assert mine.mean() == pytest.approx(factor * distribution.mean(), rel=1e-6)


def test_at_time_scale_keeps_the_workload_and_drops_what_is_not_realised() -> None:
    phased = DEFAULT_SCENARIO.replace(
        rollout_phases={"full_val": lognormal(4.0)}, stage_overhead=0.3
    )
    truth = at_time_scale(phased, 0.01)
    assert truth.rollout.mean() == pytest.approx(0.01 * phased.rollout.mean())
    assert truth.rollout_latency("full_val").mean() == pytest.approx(0.04, rel=1e-6)
    assert truth.reflection.mean() == pytest.approx(0.01 * phased.reflection.mean())
    assert (truth.budget, truth.valset_size, truth.acceptance) == (
        phased.budget,
        phased.valset_size,
        phased.acceptance,
    )
    assert truth.stage_overhead == 0.0 and truth.tokens is None and truth.uncertainty is None
    with pytest.raises(PxnError, match=r"^time scale must be a number > 0"):
        at_time_scale(phased, 0)


@pytest.mark.parametrize(
    ("changes", "subject"),
    [
        ({"rate_limits": RateLimits(task=RateLimit(rpm=60))}, "[rate_limits]"),
        ({"skip_perfect": 0.2}, "skip_perfect"),
        ({"duplicate_children": 0.1}, "duplicate_children"),
        (
            {"loads": Loads(Load(), Load(servers=2, prefix_seconds=0.5))},
            "load.reflection.prefix_seconds",
        ),
        ({"merge": True, "components": 2, "merge_acceptance": 0.5}, "components"),
    ],
)
def test_what_synthetic_work_cannot_realise_is_refused(changes, subject) -> None:
    with pytest.raises(PxnError) as caught:
        check_realisable(small(**changes))
    assert caught.value.subject == subject


# ---- the synthetic models ---------------------------------------------------


def reflect_steps(model: SyntheticReflectionModel, steps: int, k: int) -> np.ndarray:
    """Levels up per step, k reflections a step on a level-0 parent (one thread: each
    step's calls come together, as gepa's barrier makes them)."""
    prompt = [{"role": "user", "content": f"```\n{candidate_text(0, 'seed')}\n```"}]
    ups = np.zeros(steps, dtype=int)
    for step in range(steps):
        for _ in range(k):
            reply, _ = model.complete(
                prompt, clock=lambda: 0.0, on_failure=print, site=CallSite("reflection", step + 1)
            )
            ups[step] += "[[level 1]]" in reply.text
    return ups


def test_the_reflection_model_accepts_at_the_scenario_rate() -> None:
    # Seeded; alpha 0.001 (binomial, two-sided) over 4000 proposals.
    scenario = small(reflection=INSTANT, acceptance=Acceptance(0.3))
    model = SyntheticReflectionModel(scenario, np.random.default_rng(1))
    ups = reflect_steps(model, 1000, 4)
    assert scipy.stats.binomtest(int(ups.sum()), 4000, 0.3).pvalue > 0.001
    assert model.levels_up == ups.sum()


def test_siblings_share_the_steps_rate_when_correlated() -> None:
    # Beta-binomial with rho = 0.5 and k = 4: a step's count varies 1 + 3 rho = 2.5 times as
    # much as independent siblings' would. Seeded; over 2000 steps the ratio's standard
    # error is about 0.1, so the bounds are several of them wide.
    scenario = small(reflection=INSTANT, acceptance=Acceptance(0.3, correlation=0.5))
    model = SyntheticReflectionModel(scenario, np.random.default_rng(2))
    ups = reflect_steps(model, 2000, 4)
    ratio = ups.var() / (4 * 0.3 * 0.7)
    assert 2.0 < ratio < 3.0
    # The mean stays a0: within 4 standard errors of the correlated total.
    assert abs(ups.sum() - 0.3 * 8000) < 4 * np.sqrt(2000 * 4 * 0.3 * 0.7 * 2.5)
    assert len(model.step_rates) == 2000  # one rate per step, not per call


def test_a_decaying_acceptance_counts_the_proposals_before_the_step() -> None:
    acceptance = Acceptance(0.6, tau=20.0, decay_until=30.0)
    model = SyntheticReflectionModel(
        small(reflection=INSTANT, acceptance=acceptance), np.random.default_rng(0)
    )
    reflect_steps(model, 12, 4)
    expected = [acceptance.probability(4 * step) for step in range(12)]
    assert model.step_rates == pytest.approx(expected)


def test_a_models_servers_bound_the_calls_it_serves_at_once() -> None:
    # Four calls released together on a model of 2 servers, slowdown 1: each call is
    # served with at most 2 in flight, so it takes at most twice its draw (4 would let
    # one take 4 times it).
    draw = 0.05
    scenario = small(
        rollout=Distribution("empirical", samples=(draw,)),
        loads=Loads(task=Load(servers=2, slowdown=1.0)),
    )
    model = SleepingModel(scenario, np.random.default_rng(0))
    start = threading.Barrier(4)

    def call() -> None:
        start.wait()
        model.complete([], clock=lambda: 0.0, on_failure=print, site=CallSite("full_val", 1))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert model.calls == 4
    assert 4 * draw <= model.drawn <= 4 * 2 * draw + 1e-12


def test_a_runs_conditions_scale_every_call_of_a_model() -> None:
    """z = 1 with run_spread 0.5: each call takes exp(0.5 - 0.125) times its draw."""
    scenario = small(
        rollout=Distribution("empirical", samples=(0.002,)),
        loads=Loads(task=Load(run_spread=0.5)),
    )
    model = SleepingModel(scenario, np.random.default_rng(0), conditions=1.0)
    for _ in range(3):
        model.complete([], clock=lambda: 0.0, on_failure=print, site=CallSite("full_val", 1))
    assert model.drawn == pytest.approx(3 * 0.002 * math.exp(0.5 - 0.125))


def test_a_phase_draws_its_own_latency() -> None:
    scenario = small(
        rollout=Distribution("empirical", samples=(0.001,)),
        rollout_phases={"full_val": Distribution("empirical", samples=(0.003,))},
    )
    model = SleepingModel(scenario, np.random.default_rng(0))
    for phase in ("parent_minibatch", "full_val"):
        model.complete([], clock=lambda: 0.0, on_failure=print, site=CallSite(phase, 1))
    assert model.drawn == pytest.approx(0.004)


# ---- the verdict's statistics, on simulated "runs" ----------------------------


def test_the_engine_overhead_measured_is_the_one_simulated(tmp_path: Path) -> None:
    # The simulator list-schedules every stage and pays stage_overhead before it: its
    # traces hold no dispatch, and their overhead per stage is the scenario's.
    scenario = small(stage_overhead=0.07)
    path = tmp_path / "sim.jsonl"
    with TraceWriter(path) as writer:
        simulate_once(scenario, Shape(2, 2), 0, writer)
    trace = read_trace(path)
    assert dispatch(trace) == pytest.approx(0.0, abs=1e-9)
    assert engine_overhead([trace]) == pytest.approx(0.07, rel=1e-9)


def simulated_runs(scenario: Scenario, shapes: list[Shape], runs: int, tmp: Path) -> list[Path]:
    """Traces the simulator writes, replicates of a seed the judge does not use, standing
    in for real runs."""
    paths = []
    for shape in shapes:
        for run in range(runs):
            path = tmp / f"{shape}-{run}.jsonl"
            with TraceWriter(path) as writer:
                simulate_once(scenario.replace(seed=scenario.seed + 1), shape, run, writer)
            paths.append(path)
    return paths


def test_the_verdict_passes_the_right_simulator_and_flags_a_wrong_one(tmp_path: Path) -> None:
    # Seeded throughout: the "runs" are simulator replicates on seeds the judge never uses.
    truth = small(budget=200)
    shapes = [Shape(1, 1), Shape(2, 2)]
    paths = simulated_runs(truth, shapes, 8, tmp_path)

    right = judge(truth, paths, replicates=100)
    assert right.conforms, right.verdict
    assert len(right.runs) == 16 and {(g.shape, g.workers) for g in right.groups} == {
        (s, 4) for s in shapes
    }
    assert all(0 <= r.percentile <= 1 for r in right.runs)
    assert "conforms" in right.verdict

    # Rollouts half as long as the runs had: every run sits above the simulated band.
    wrong = judge(truth.replace(rollout=lognormal(0.5, 0.5)), paths, replicates=100)
    assert not wrong.conforms
    assert all(g.flagged for g in wrong.groups)
    assert "does NOT conform" in wrong.verdict and "slower than simulated" in wrong.verdict


def test_a_run_whose_trace_disagrees_with_gepa_fails_the_verdict(tmp_path: Path) -> None:
    truth = small(budget=200)
    paths = simulated_runs(truth, [Shape(2, 2)], 3, tmp_path)
    result = judge(truth, paths, replicates=50, trace_checks={str(paths[0]): "trace has 3"})
    assert not result.conforms
    assert "disagree with gepa's own counts" in result.verdict


# ---- the command's input ------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (["--runs", "0"], ["--runs must be at least 1"]),
        (["--time-scale", "0"], ["--time-scale must be a number > 0"]),
        (["--workers", "4,x"], ["--workers are whole numbers"]),
        (["--shapes", "2x"], ["--shapes is 'PxN'"]),
    ],
)
def test_bad_flags_are_one_line(flags, fragments, tmp_path: Path) -> None:
    assert_user_error(run_pxn("conformance", *flags, "--out", tmp_path / "x"), *fragments)
    assert not (tmp_path / "x").exists()


def test_an_out_holding_runs_is_refused_before_any_run(tmp_path: Path) -> None:
    (tmp_path / "runs" / "2x2-w4-r0").mkdir(parents=True)
    assert_user_error(run_pxn("conformance", "--out", tmp_path), "--out", "already holds")
    assert list((tmp_path / "runs").iterdir()) == [tmp_path / "runs" / "2x2-w4-r0"]


# ---- the real engine ------------------------------------------------------------


@pytest.mark.slow
def test_real_gepa_on_synthetic_work_conforms_and_a_wrong_acceptance_is_flagged(
    tmp_path: Path,
) -> None:
    truth = at_time_scale(small(), 0.01)
    grid = RunGrid([Shape(1, 1), Shape(2, 2)], [4], runs=3)
    runs = run_grid(truth, grid, tmp_path)
    assert len(runs) == 6

    for run in runs:
        trace = read_trace(run.trace)
        assert trace.skipped == [] and trace.run_end.status == "completed"
        assert run.trace_check == "ok"
        result, totals = run.result.result, trace_totals(trace)
        assert totals.metric_calls == result["metric_calls"] == run.rollout_calls
        assert totals.full_val_evals == result["full_val_evals"]
        # gepa's own rule accepted exactly the children written a level up.
        assert totals.accepted == result["accepted"] == run.search.levels_up
        assert totals.max_concurrent <= 4
        assert {r.phase for r in trace.of(Rollout)} == {
            "seed_val",
            "parent_minibatch",
            "child_minibatch",
            "full_val",
        }
        assert trace.run_start.meta["synthetic"]["scenario"] == truth.to_dict()

    checks = {str(run.trace): run.trace_check for run in runs}
    paths = [run.trace for run in runs]
    right = judge(truth, paths, replicates=200, trace_checks=checks)
    assert sorted(r.check.run for r in right.runs) == sorted(map(str, paths))
    assert right.gepa_versions == ["0.1.4"]
    assert right.conforms, right.verdict

    # Told that 90% of proposals are accepted, the simulator spends the budget on full
    # validations instead of iterations (and their reflections): it predicts other runs
    # than these, single's most (its one proposal a step decides whether a step validates).
    wrong = judge(truth.replace(acceptance=Acceptance(0.9)), paths, 200, trace_checks=checks)
    assert not wrong.conforms
    flagged = {g.shape for g in wrong.groups if g.flagged}
    assert Shape(1, 1) in flagged, wrong.verdict
