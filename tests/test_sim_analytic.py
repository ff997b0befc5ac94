"""The closed form (pxn.sim.analytic) against paper.md, and against the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_helpers import fixed, make_scenario

from pxn.acceptance import Acceptance
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import analytic, expected_selected
from pxn.sim.model import simulate_once


def deterministic(**changes) -> Scenario:
    """Fixed latencies and a pool wide enough that no stage queues (W >= k V for k <= 8)."""
    base = {
        "budget": 8000,
        "valset_size": 50,
        "workers": 512,
        "reflection_concurrency": 16,
        "rollout": fixed(2.0),
        "reflection": fixed(10.0),
        "stage_overhead": 0.5,
        "acceptance": Acceptance(0.2),
    }
    return make_scenario(**(base | changes))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "budget"),
    [(Shape(1, 1), 6000), (Shape(2, 2), 12000), (Shape(4, 2), 16000), (Shape(8, 1), 16000)],
    ids=str,
)
def test_simulated_mean_equals_the_closed_form(shape: Shape, budget: int) -> None:
    # The budget grows with k so that the last iteration's overshoot (which the
    # closed form leaves out) stays well under 1% of the run.
    scenario = deterministic(budget=budget)
    runs = [simulate_once(scenario, shape, r) for r in range(200)]
    closed = analytic(scenario, shape)
    mean_wall = np.mean([r.wall_clock for r in runs])
    assert mean_wall == pytest.approx(closed.wall_clock, rel=0.02)
    assert np.mean([r.iterations for r in runs]) == pytest.approx(closed.iterations, rel=0.02)
    # With constant acceptance and no skipping, an iteration validates with probability q_k.
    share = sum(r.full_val_iterations for r in runs) / sum(r.iterations for r in runs)
    assert share == pytest.approx(closed.q_k, abs=0.02)


@pytest.mark.parametrize("a", [0.0, 0.05, 0.17, 0.5, 1.0])
@pytest.mark.parametrize("k", [1, 2, 4, 16])
def test_q_k_is_one_minus_all_rejected(a: float, k: int) -> None:
    closed = analytic(deterministic(acceptance=Acceptance(a)), Shape(k, 1))
    assert closed.q_k == pytest.approx(1 - (1 - a) ** k)
    assert closed.acceptance == a


def test_step_and_validation_latency_follow_the_paper() -> None:
    te, tr, overhead = 3.0, 20.0, 0.5
    scenario = deterministic(
        rollout=fixed(te),
        reflection=fixed(tr),
        stage_overhead=overhead,
        valset_size=100,
        workers=64,
        reflection_concurrency=4,
    )
    # k V <= W: full validation takes one rollout latency.
    assert analytic(scenario.replace(workers=100), Shape(1, 1)).l_val == pytest.approx(
        overhead + te
    )
    # k V > W: it queues, (k V / W) T_e.
    closed = analytic(scenario, Shape(2, 4))
    assert closed.l_val == pytest.approx(overhead + 8 * 100 / 64 * te)
    # L_step: two minibatch stages of k b rollouts (24 <= 64: one round each) and k = 8
    # reflections two rounds deep on 4 slots.
    assert closed.l_step == pytest.approx(3 * overhead + 2 * te + (8 / 4) * tr)


def test_strong_scaling_bound_is_budget_times_rollout_over_workers() -> None:
    scenario = make_scenario(budget=5000, workers=64)
    for shape in (Shape(1, 1), Shape(4, 4)):
        closed = analytic(scenario, shape)
        assert closed.bound == pytest.approx(5000 * scenario.rollout.mean() / 64)
        assert closed.bound > 0


@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2), Shape(8, 2)], ids=str)
def test_speedup_is_the_papers_ratio(shape: Shape) -> None:
    scenario = make_scenario(acceptance=Acceptance(0.17), workers=512, valset_size=100)
    closed = analytic(scenario, shape)
    a, k = 0.17, shape.k
    want = k * (closed.l_step + a * closed.l_val) / (closed.l_step + closed.q_k * closed.l_val)
    assert closed.speedup == pytest.approx(want)
    if k == 1:
        assert closed.speedup == pytest.approx(1.0)


def test_iterations_are_the_proposals_the_budget_affords_over_k() -> None:
    scenario = deterministic(budget=5000, valset_size=100, acceptance=Acceptance(0.1))
    for k in (1, 4, 8):
        closed = analytic(scenario, Shape(k, 1))
        per_iteration = 2 * k * 3 + k * 0.1 * 100
        assert closed.iterations == pytest.approx((5000 - 100) / per_iteration)
        overhead = scenario.stage_overhead
        seed = overhead + 2.0  # V = 100 <= W: one round
        wall = seed + closed.iterations * (closed.l_step + closed.q_k * closed.l_val)
        assert closed.wall_clock == pytest.approx(wall)


def test_decaying_acceptance_is_averaged_over_the_run() -> None:
    scenario = deterministic(acceptance=Acceptance(0.6, tau=50.0))
    closed = analytic(scenario, Shape(2, 2))
    made = closed.iterations * 4
    assert closed.acceptance == pytest.approx(scenario.acceptance.mean_over(made))
    assert 0 < closed.acceptance < 0.6
    assert Acceptance(0.6, tau=50.0).mean_over(1e-9) == pytest.approx(0.6)
    assert Acceptance(0.6, tau=50.0).mean_over(50.0) == pytest.approx(0.6 * (1 - math.e**-1))


def test_selection_caps_the_children_validated() -> None:
    assert expected_selected(4, 0.3, None) == pytest.approx(1.2)
    # best: one child whenever any is accepted.
    assert expected_selected(4, 0.3, 1) == pytest.approx(1 - 0.7**4)
    assert expected_selected(4, 0.3, 4) == pytest.approx(1.2)
    scenario = deterministic(selection="best", valset_size=100, workers=64)
    assert analytic(scenario, Shape(8, 1)).l_val == pytest.approx(0.5 + 100 / 64 * 2.0)


def test_a_local_pool_narrows_the_pool_and_the_reflection_cap() -> None:
    """lm_servers = K: W becomes min(W, K), C min(C, K); no slowdown in the closed form."""
    pooled = deterministic(workers=8, reflection_concurrency=6, lm_servers=2, load_slowdown=0.7)
    narrow = deterministic(workers=2, reflection_concurrency=2)
    wide = deterministic(workers=8, reflection_concurrency=6, lm_servers=16)
    for shape in (Shape(1, 1), Shape(2, 2)):
        assert analytic(pooled, shape) == analytic(narrow, shape)
        assert analytic(wide, shape) == analytic(
            deterministic(workers=8, reflection_concurrency=6), shape
        )
        assert analytic(pooled, shape).bound == pytest.approx(8000 * 2.0 / 2)


def test_closed_form_matches_the_simulator_on_a_local_pool() -> None:
    """Stages that fill the K = 2 servers exactly, one child validated: the two agree."""
    scenario = deterministic(budget=6000, workers=8, lm_servers=2, selection="best")
    shape = Shape(2, 2)  # 12 minibatch rollouts, 4 reflections and V = 50 all fill 2 servers
    runs = [simulate_once(scenario, shape, r) for r in range(60)]
    closed = analytic(scenario, shape)
    assert np.mean([r.wall_clock for r in runs]) == pytest.approx(closed.wall_clock, rel=0.02)
    assert np.mean([r.iterations for r in runs]) == pytest.approx(closed.iterations, rel=0.02)
