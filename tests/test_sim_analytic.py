"""The closed form (pxn.sim.analytic) against paper.md, and against the simulator."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest
from scipy import integrate, special, stats
from sim_helpers import fixed, lognormal, make_scenario

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


def within(values: list[float], expected: float, ses: float = 4.0) -> bool:
    """The sample mean lies within `ses` standard errors of `expected` (or equals it)."""
    x = np.asarray(values, float)
    return abs(x.mean() - expected) <= ses * x.std(ddof=1) / math.sqrt(len(x)) + 1e-9


SIMULATED = {
    "single": (Shape(1, 1), {"budget": 6000}),
    "2x2": (Shape(2, 2), {"budget": 12000}),
    "4x2": (Shape(4, 2), {"budget": 16000}),
    "8x1": (Shape(8, 1), {"budget": 16000}),
    # A few iterations: the last one's overshoot is a large share of the run.
    "2x2 short": (Shape(2, 2), {"budget": 500}),
    "4x1 correlated, decaying, topk, repeats": (
        Shape(4, 1),
        {
            "budget": 3000,
            "acceptance": Acceptance(0.6, tau=40.0, decay_until=60.0, correlation=0.3),
            "selection": "topk:2",
            "duplicate_children": 0.4,
        },
    ),
    "2x2 per-phase latencies": (
        Shape(2, 2),
        {
            "budget": 3000,
            "rollout_phases": {"parent_minibatch": fixed(1.0), "full_val": fixed(6.0)},
        },
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIMULATED))
def test_simulated_mean_equals_the_closed_form(name: str) -> None:
    """Fixed latencies on a pool no stage fills: the closed form is the simulator's mean."""
    shape, changes = SIMULATED[name]
    scenario = deterministic(**changes)
    runs = [simulate_once(scenario, shape, r) for r in range(200)]
    closed = analytic(scenario, shape)
    assert within([r.iterations for r in runs], closed.iterations)
    assert within([r.wall_clock for r in runs], closed.wall_clock)
    assert within([r.full_val_iterations for r in runs], closed.q_k * closed.iterations)
    assert within([r.proposals for r in runs], closed.iterations * shape.k)


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


def test_the_closed_form_uses_each_phases_capped_mean() -> None:
    """Means are Distribution.mean(): of the capped draw, retries included, per phase."""
    timed_out = replace(lognormal(2.0, 1.2), cap=4.0, cap_retries=2)
    parent, val = replace(lognormal(3.0, 1.0), cap=5.0), fixed(6.0)
    scenario = deterministic(
        rollout=timed_out,
        rollout_phases={"parent_minibatch": parent, "full_val": val},
        valset_size=100,
        workers=64,
        reflection_concurrency=4,
    )
    assert timed_out.mean() != lognormal(2.0, 1.2).mean()  # the cap changes the mean
    closed = analytic(scenario, Shape(2, 4))  # 24 minibatch rollouts fit 64; k = 8 on C = 4
    t_child, t_seed = timed_out.mean(), timed_out.mean()
    assert closed.l_step == pytest.approx(3 * 0.5 + parent.mean() + t_child + 2 * 10.0)
    assert closed.l_val == pytest.approx(0.5 + 8 * 100 / 64 * 6.0)
    seed = 0.5 + 100 / 64 * t_seed
    wall = seed + closed.iterations * closed.l_step + closed.q_k * closed.iterations * closed.l_val
    assert closed.wall_clock == pytest.approx(wall)
    # The bound's T_e weighs each phase's mean by the calls it is expected to make.
    assert min(t_seed, parent.mean(), 6.0) < closed.bound * 64 / scenario.budget < 6.0


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


def enumerated(scenario: Scenario, shape: Shape) -> tuple[float, float, float]:
    """(E[iterations], E[full-validation iterations], the steps' mean acceptance), exactly.

    Every reachable amount of metric calls spent is kept with its probability,
    step by step, until none leaves budget; each step's children validated are
    enumerated from the accepted count (binomial, or beta-binomial through the
    Beta function), the selection limit and the repeats.
    """
    k, b, v = shape.k, scenario.minibatch, scenario.valset_size
    acceptance, limit = scenario.acceptance, scenario.selection.limit
    repeat = scenario.duplicate_children
    afforded = scenario.budget - v
    spent: dict[int, float] = {0: 1.0} if afforded > 0 else {}
    step = iterations = full = accepted_rate = 0.0
    while spent:
        a = acceptance.a0
        if acceptance.tau is not None:
            made = step * k
            if acceptance.decay_until is not None:
                made = min(made, acceptance.decay_until)
            a = acceptance.a0 * math.exp(-made / acceptance.tau)
        children: dict[int, float] = defaultdict(float)
        for j in range(k + 1):
            if acceptance.correlation and 0 < a < 1:
                spread = 1 / acceptance.correlation - 1
                alpha, beta_ = a * spread, (1 - a) * spread
                p_j = math.comb(k, j) * special.beta(j + alpha, k - j + beta_)
                p_j /= special.beta(alpha, beta_)
            else:
                p_j = math.comb(k, j) * a**j * (1 - a) ** (k - j)
            selected = j if limit is None else min(j, limit)
            if selected == 0:
                children[0] += p_j
                continue
            for copies in range(selected):  # of the selected - 1 after the first
                p_copies = math.comb(selected - 1, copies) * repeat**copies
                p_copies *= (1 - repeat) ** (selected - 1 - copies)
                children[selected - copies] += p_j * p_copies
        running = sum(spent.values())
        iterations += running
        full += running * (1 - children[0])
        accepted_rate += running * a
        after: dict[int, float] = defaultdict(float)
        for calls, p in spent.items():
            for z, p_z in children.items():
                if p_z and calls + 2 * k * b + z * v < afforded:
                    after[calls + 2 * k * b + z * v] += p * p_z
        spent = {c: p for c, p in after.items() if p > 1e-18}
        step += 1
    return iterations, full, accepted_rate / iterations


def test_iterations_without_randomness_are_the_ceiling() -> None:
    """Every iteration spends the same calls: the run is ceil((B - V) / calls) iterations."""
    for a, selection, per_child in ((0.0, "all", 0), (1.0, "best", 1)):
        scenario = deterministic(budget=5000, valset_size=100, acceptance=Acceptance(a),
                                 selection=selection)  # fmt: skip
        for k in (1, 4, 8):
            closed = analytic(scenario, Shape(k, 1))
            calls = 2 * k * 3 + per_child * 100
            assert closed.iterations == pytest.approx(math.ceil((5000 - 100) / calls), rel=1e-12)
            # ... where B/E[X] leaves out the last iteration's overshoot.
            if (5000 - 100) % calls:
                assert closed.iterations > (5000 - 100) / calls


@pytest.mark.parametrize(
    "changes",
    [
        {"acceptance": Acceptance(0.1)},
        {"acceptance": Acceptance(0.6, tau=40.0), "selection": "topk:2"},
        {"acceptance": Acceptance(0.5, tau=30.0, decay_until=20.0, correlation=0.3)},
        {"acceptance": Acceptance(0.4, correlation=0.5), "duplicate_children": 0.4},
    ],
    ids=["constant", "decaying topk", "bounded correlated", "correlated repeats"],
)
@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2), Shape(3, 1)], ids=str)
def test_iterations_are_exact_for_the_per_iteration_calls(changes: dict, shape: Shape) -> None:
    scenario = deterministic(budget=900, valset_size=40, **changes)
    closed = analytic(scenario, shape)
    iterations, full, acceptance = enumerated(scenario, shape)
    assert closed.iterations == pytest.approx(iterations, rel=1e-9)
    assert closed.q_k * closed.iterations == pytest.approx(full, rel=1e-9)
    assert closed.acceptance == pytest.approx(acceptance, rel=1e-9)
    seed = 0.5 + 2.0  # overhead and one round: V = 40 <= W
    wall = seed + closed.iterations * closed.l_step + full * closed.l_val
    assert closed.wall_clock == pytest.approx(wall, rel=1e-9)
    # Lorden's bound on the overshoot: A/E[X] <= E[N] <= A/E[X] + E[X^2]/E[X]^2 (constant a).
    if scenario.acceptance.tau is None:
        k, a, v = shape.k, scenario.acceptance.a0, 40
        children = np.arange(k + 1)
        pmf = stats.binom.pmf(children, k, a)
        if scenario.acceptance.correlation:
            spread = 1 / scenario.acceptance.correlation - 1
            pmf = stats.betabinom.pmf(children, k, a * spread, (1 - a) * spread)
        if scenario.duplicate_children == 0 and scenario.selection.limit is None:
            calls = 2 * k * 3 + children * v
            mean, square = calls @ pmf, calls**2 @ pmf
            assert 860 / mean <= closed.iterations <= 860 / mean + square / mean**2


def test_decaying_acceptance_is_averaged_over_the_runs_steps() -> None:
    acceptance = Acceptance(0.6, tau=50.0)
    closed = analytic(deterministic(acceptance=acceptance), Shape(2, 2))
    final = acceptance.probability(closed.iterations * 4)
    assert final < closed.acceptance < 0.6
    held = analytic(
        deterministic(acceptance=Acceptance(0.6, tau=50.0, decay_until=40.0)), Shape(2, 2)
    )
    assert held.acceptance > acceptance.probability(40.0) * 0.999  # it stops decaying at 40


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.8])
@pytest.mark.parametrize("k", [1, 4, 16])
def test_correlated_q_k_is_one_minus_a_beta_function_ratio(rho: float, k: int) -> None:
    a = 0.2
    closed = analytic(deterministic(acceptance=Acceptance(a, correlation=rho)), Shape(k, 1))
    alpha, beta_ = a * (1 / rho - 1), (1 - a) * (1 / rho - 1)
    assert closed.q_k == pytest.approx(
        1 - special.beta(alpha, beta_ + k) / special.beta(alpha, beta_)
    )
    # Siblings that succeed together leave more steps with none: q_k below independence.
    if k > 1:
        assert closed.q_k < 1 - (1 - a) ** k


@pytest.mark.parametrize("limit", [None, 1, 3])
def test_expected_selected_integrates_the_binomial_over_the_beta(limit: int | None) -> None:
    k, a, rho = 6, 0.3, 0.4
    alpha, beta_ = a * (1 / rho - 1), (1 - a) * (1 / rho - 1)

    def given(p: float) -> float:
        j = np.arange(k + 1)
        return float(np.minimum(j, limit or k) @ stats.binom.pmf(j, k, p))

    want = integrate.quad(lambda p: given(p) * stats.beta.pdf(p, alpha, beta_), 0, 1)[0]
    assert expected_selected(k, a, limit, correlation=rho) == pytest.approx(want, rel=1e-6)


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
