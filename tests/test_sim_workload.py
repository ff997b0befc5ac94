"""The work estimate that refuses absurd predictions: its replicate sizes against the
simulator's own counts, and its refusals naming what the work would need."""

from __future__ import annotations

import pytest
from sim_helpers import make_scenario

from pxn.errors import PxnError
from pxn.shape import Shape
from pxn.sim.predict import simulate_replicates
from pxn.sim.presets import load_scenario
from pxn.sim.workload import Cost, Replicate, Work, check_work, estimate

SHAPES = [Shape(1, 1), Shape(2, 2), Shape(4, 4), Shape(8, 8), Shape(32, 32)]
# The estimate leaves out gepa's skips, repeated parents and decaying acceptance: within
# these factors of the simulated means it serves to refuse work and to time it.
ITERATIONS_WITHIN, CALLS_WITHIN = 2.5, 2.0


@pytest.mark.parametrize("scenario", ["hover", "livebench-math", "small"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_replicates_size_is_the_simulated_one_within_a_small_factor(
    scenario: str, shape: Shape
) -> None:
    the_scenario = make_scenario(budget=2000) if scenario == "small" else load_scenario(scenario)
    runs = simulate_replicates(the_scenario, shape, range(20))  # seeded: the same every time
    iterations = sum(r.iterations for r in runs) / len(runs)
    calls = sum(r.metric_calls + r.proposals for r in runs) / len(runs)
    accepted = sum(r.accepted for r in runs) / max(1, sum(r.proposals for r in runs))
    guess = Replicate.of(the_scenario, shape, accepted)  # the scenario's a0 where it has one
    assert 1 / ITERATIONS_WITHIN <= guess.iterations / iterations <= ITERATIONS_WITHIN
    assert 1 / CALLS_WITHIN <= guess.calls / calls <= CALLS_WITHIN


def test_work_adds_up_its_runs_and_grows_with_the_budget() -> None:
    scenario = make_scenario(budget=2000)
    cost = Cost(per_iteration=1e-4, per_call=1e-6, acceptance=0.2)
    one = estimate([(scenario, Shape(2, 2), 10)], cost)
    two = estimate([(scenario, Shape(2, 2), 10), (scenario, Shape(1, 1), 5)], cost)
    assert (one.replicates, two.replicates) == (10, 15)
    assert two.seconds > one.seconds
    bigger = estimate([(scenario.replace(budget=200_000), Shape(2, 2), 10)], cost)
    assert bigger.seconds > 50 * one.seconds  # a hundred times the calls
    assert one.wall_seconds(2) == pytest.approx(one.seconds / 2)


def test_cost_is_measured_positive_on_this_machine() -> None:
    cost = Cost.measured(make_scenario(budget=2000))
    assert cost.per_call > 0 and cost.per_iteration >= 0


def test_refusals_say_what_the_work_would_need() -> None:
    years = Work(replicates=100, seconds=3 * 365 * 86400, largest_stage=10, held_bytes=1e5)
    with pytest.raises(PxnError, match=r"this sweep would take ~\d+ days on 2 processes"):
        check_work(years, 2, "this sweep", "ask for less")
    huge = Work(replicates=100, seconds=1.0, largest_stage=1e13, held_bytes=1e5)
    with pytest.raises(PxnError, match=r"would need ~[\d,]+ TB of memory .*: ask for less"):
        check_work(huge, 2, "this sweep", "ask for less")
    check_work(Work(100, 60.0, 1000, 1e5), 2, "this sweep", "ask for less")  # a minute: started
