"""A run to budget B holds every smaller budget's run as its prefix, to the bit.

gepa checks its budget only at the top of an iteration, and nothing before
that check depends on the budget; so `simulate_budgets`, one run to the
largest budget that keeps its summary at each smaller one's check, must give
exactly what `simulate_once` gives at each budget alone: every field of the
summary (wall-clock, stages, dollars, the search's scores, progress and
figures) compared by its repr, which tells every bit of a float and NaN
from NaN. The scenarios cover both search models, gepa's merge under each,
provider limits with tokens and dollars, and lost proposals ([failures]).
"""

from __future__ import annotations

import dataclasses

import pytest
from sim_helpers import EVERYTHING, make_scenario, searched

from pxn.acceptance import Acceptance
from pxn.failures import Failures
from pxn.shape import Shape
from pxn.sim.model import simulate_budgets, simulate_once
from pxn.sim.predict import simulate_replicates, simulate_replicates_at

BUDGETS = (20, 21, 95, 250, 251, 400, 777)  # V = 20: a budget spent on the seed, then more

LOSING = Failures(dataset=0.15, reflection=0.3, retry=0.6)
SCENARIOS = {
    "rates": make_scenario(skip_perfect=0.1),
    "quality": searched(),
    "rates, merge": make_scenario(
        merge=True, components=2, merge_acceptance=0.5, acceptance=Acceptance(0.6)
    ),
    "quality, merge": searched({"seed_score": 0.3}, merge=True, components=3, max_merges=4),
    "rate limits, tokens, dollars": EVERYTHING,
    "quality, rate limits, dollars": searched(
        **{
            name: getattr(EVERYTHING, name)
            for name in ("loads", "tokens", "prices", "rate_limits", "rollout", "rollout_phases")
        }
    ),
    "rates, failures": make_scenario(failures=LOSING),
    "quality, failures, one reflection at a time": searched(
        failures=LOSING, reflection_concurrency=1, optimizer="dspy.GEPA"
    ),
    "quality, merge, failures, limits": searched(
        merge=True,
        components=2,
        failures=LOSING,
        tokens=EVERYTHING.tokens,
        prices=EVERYTHING.prices,
        rate_limits=EVERYTHING.rate_limits,
    ),
}


def bits(summary) -> str:
    """Every field of a summary, floats to the bit (repr round-trips; NaN equals NaN)."""
    return repr(dataclasses.astuple(summary))


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2), Shape(4, 1)], ids=str)
def test_a_smaller_budgets_run_is_a_prefix_of_the_longer_one(name: str, shape: Shape) -> None:
    longest = SCENARIOS[name].replace(budget=max(BUDGETS))
    for replicate in range(3):
        prefixes = simulate_budgets(longest, shape, replicate, BUDGETS)
        alone = [simulate_once(longest.replace(budget=b), shape, replicate) for b in BUDGETS]
        assert [bits(s) for s in prefixes] == [bits(s) for s in alone], (name, replicate)
        # The budgets were reached at different points: the test is not of one summary.
        assert len({s.iterations for s in prefixes}) > 3


def test_the_prefixes_hold_scores_that_move_and_merges_and_losses() -> None:
    """The scenarios exercise what they are named for within the budgets compared."""
    runs = {
        name: simulate_budgets(s.replace(budget=max(BUDGETS)), Shape(2, 2), 0, BUDGETS)
        for name, s in SCENARIOS.items()
    }
    assert runs["quality"][-1].test_score != runs["quality"][1].test_score
    assert runs["rates, merge"][-1].merges > 0 and runs["quality, merge"][-1].merges > 0
    assert runs["rate limits, tokens, dollars"][-1].throttled_calls > 0
    assert runs["rates, failures"][-1].failed > 0


def test_a_parameter_draws_replicates_are_prefixes_too() -> None:
    """With draws, replicate r runs draw r mod D at every budget."""
    from pxn.scenario import Uncertainty

    draws = Uncertainty(
        "three", ({"acceptance.a0": 0.1}, {"acceptance.a0": 0.5}, {"acceptance.a0": 0.3})
    )
    scenario = make_scenario(budget=600, uncertainty=draws)
    budgets = (150, 600, 300)  # in any order: a summary per budget, in the order given
    for replicate in range(4):
        prefixes = simulate_budgets(scenario, Shape(2, 1), replicate, budgets)
        alone = [simulate_once(scenario.replace(budget=b), Shape(2, 1), replicate) for b in budgets]
        assert [bits(s) for s in prefixes] == [bits(s) for s in alone]


def test_replicates_at_budgets_are_the_replicates_at_each_budget() -> None:
    scenario = searched(budget=500)
    at = simulate_replicates_at(scenario, Shape(2, 1), range(2, 5), (100, 500))
    for i, b in enumerate((100, 500)):
        each = simulate_replicates(scenario.replace(budget=b), Shape(2, 1), range(2, 5))
        assert [bits(runs[i]) for runs in at] == [bits(s) for s in each]


def test_the_run_goes_to_the_largest_budget() -> None:
    with pytest.raises(ValueError, match="largest budget"):
        simulate_budgets(make_scenario(budget=400), Shape(1, 1), 0, (100, 200))
