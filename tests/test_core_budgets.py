"""Several budgets, DSPy's budgets in a scenario, and budgets too small to search.

A list of budgets is read as the CLI's --budget takes it (ranges double);
a scenario may give its budget as dspy.GEPA does, with its program's
predictors, and then holds DSPy's own metric calls for it; and the
proposals a budget affords, worked out before anything is simulated, are
what the simulator makes when no child is accepted.
"""

from __future__ import annotations

import pytest
from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS
from sim_helpers import make_scenario

from pxn.acceptance import Acceptance
from pxn.budget import (
    budget_for_proposals,
    doublings,
    dspy_auto_levels,
    metric_calls_of,
    parse_budgets,
    proposals_afforded,
    resolve_budgets,
    too_few_proposals,
)
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.sim.presets import load_scenario


def test_a_range_doubles_from_its_low_end_and_ends_at_its_high_one() -> None:
    assert doublings(500, 20000) == [500, 1000, 2000, 4000, 8000, 16000, 20000]
    assert doublings(500, 4000) == [500, 1000, 2000, 4000]
    assert doublings(700, 700) == [700]
    assert [b.metric_calls for b in parse_budgets(" 1000 , 250..1000,3000")] == [
        1000, 250, 500, 1000, 3000,
    ]  # fmt: skip


def test_budgets_resolve_in_order_with_dspys_names_kept() -> None:
    light = metric_calls_of("auto:light", predictors=1, valset_size=100, trainset_size=100)
    named = resolve_budgets(
        f"2000,{light},auto:light,500..1000", predictors=1, valset_size=100, trainset_size=100
    )
    assert named == {500: "500", light: "auto:light", 1000: "1000", 2000: "2000"}


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("4000..1000", "'4000..1000' runs from a larger budget to a smaller one"),
        ("0..100", "budget must be at least 1"),
        ("100,,200", "budget is metric calls"),
        ("1..x", "got '1..x'"),
    ],
)
def test_a_bad_list_of_budgets_is_one_line(given: str, fragment: str) -> None:
    with pytest.raises(PxnError, match="budget") as caught:
        parse_budgets(given)
    assert fragment in str(caught.value)


def test_dspys_auto_levels_are_its_auto_budgets() -> None:
    levels = dspy_auto_levels(3, 100)
    assert list(levels) == [f"auto:{level}" for level in AUTO_RUN_SETTINGS]
    for label, calls in levels.items():
        assert calls == metric_calls_of(label, predictors=3, valset_size=100, trainset_size=7)
    assert dspy_auto_levels(1, 100) == {"auto:light": 780, "auto:medium": 1190, "auto:heavy": 1735}


# -- a scenario with dspy.GEPA's budget -------------------------------------------------


def dspy_hover(**keys) -> Scenario:
    data = load_scenario("hover").to_dict() | {"optimizer": "dspy.GEPA"}
    data["reflection_concurrency"] = 1
    return Scenario.from_dict(data | keys)


@pytest.mark.parametrize("level", ["auto:light", "auto:heavy", "full-evals:2"])
def test_a_scenarios_dspy_budget_is_dspys_metric_calls(level: str) -> None:
    scenario = dspy_hover(budget=level, predictors=2)
    assert scenario.budget == metric_calls_of(
        level, predictors=2, valset_size=scenario.valset_size, trainset_size=scenario.trainset_size
    )
    assert (scenario.budget_given, scenario.predictors, scenario.from_dspy) == (level, 2, True)
    again = Scenario.from_dict(scenario.to_dict())
    assert again == scenario and again.to_dict()["budget"] == level


def test_a_dspy_budget_follows_v_and_the_predictors_until_a_budget_replaces_it() -> None:
    scenario = dspy_hover(budget="auto:medium", predictors=2)
    smaller = scenario.replace(valset_size=50)
    assert smaller.budget == metric_calls_of(
        "auto:medium", predictors=2, valset_size=50, trainset_size=scenario.trainset_size
    )
    assert scenario.replace(predictors=4).budget > scenario.budget
    fixed = scenario.replace(budget=900)
    assert (fixed.budget, fixed.budget_given) == (900, None)
    assert fixed.to_dict()["budget"] == 900


def test_without_predictors_an_auto_budget_counts_the_programs_components() -> None:
    merging = dspy_hover(budget="auto:light", merge=True, components=3)
    assert merging.budget == dspy_hover(budget="auto:light", predictors=3).budget
    with pytest.raises(PxnError, match="predictors is 2, but components is 3"):
        dspy_hover(budget="auto:light", merge=True, components=3, predictors=2)
    with pytest.raises(PxnError, match="budget auto:huge is not one of DSPy's"):
        dspy_hover(budget="auto:huge")
    with pytest.raises(PxnError, match="predictors must be a whole number >= 1"):
        dspy_hover(budget="auto:light", predictors=0)


def test_a_scenario_in_metric_calls_writes_no_new_key() -> None:
    hover = load_scenario("hover")
    assert "predictors" not in hover.to_dict() and hover.budget_given is None
    assert not hover.from_dspy


# -- budgets too small to search ----------------------------------------------------------


@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2), Shape(1, 3)], ids=str)
@pytest.mark.parametrize("budget", [20, 21, 26, 27, 45, 100, 333])
def test_the_proposals_afforded_are_those_a_run_without_acceptance_makes(shape, budget) -> None:
    """No child accepted, none skipped, a trainset of many chunks: the most proposals."""
    scenario = make_scenario(budget=budget, acceptance=Acceptance(0.0), trainset_size=200)
    proposals = {simulate_once(scenario, shape, r).proposals for r in range(2)}
    assert proposals == {proposals_afforded(budget, 20, 3, shape.k)}


def test_gepa_375s_budget_is_told_with_the_budget_that_would_do() -> None:
    """max_metric_calls=8 on six validation examples: one proposal."""
    told = too_few_proposals(8, valset_size=6, minibatch=3, k=1)
    assert told == (
        "B=8 affords at most 1 proposal after the seed's validation (V=6 metric calls, then "
        "at least 2kb = 6 an iteration of k=1 proposals at b=3): 3 proposals need B >= 19"
    )
    assert proposals_afforded(19, 6, 3, 1) == 3 and proposals_afforded(18, 6, 3, 1) == 2
    assert too_few_proposals(19, 6, 3, 1) is None
    assert "no proposal" in too_few_proposals(6, 6, 3, 4, wanted=10)
    for wanted, k in ((10, 4), (1, 1), (7, 2)):
        least = budget_for_proposals(wanted, 30, 2, k)
        assert proposals_afforded(least, 30, 2, k) >= wanted
        assert proposals_afforded(least - 1, 30, 2, k) < wanted
