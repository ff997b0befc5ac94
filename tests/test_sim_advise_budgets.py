"""`pxn advise` with the budget as a dial: several budgets, the score they buy, a target.

Every allocation at every budget is read off one run per replicate to the
largest budget; its figures must be those of an ask at that budget alone, to
the bit. Then the decisions: the best score that meets the constraints and
what bound it, the fastest or cheapest allocation reaching a target score, the
refusals, each checked against the assessments themselves.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import assert_user_error, run_pxn
from sim_helpers import fixed, make_scenario, searched

from pxn.acceptance import Acceptance
from pxn.api import advise as api_advise
from pxn.api.advice_report import advice_report
from pxn.errors import PxnError
from pxn.prices import Prices
from pxn.scenario import Scenario
from pxn.sim import advise as advise_module
from pxn.sim.advise import TARGET_CHANCE, Ask
from pxn.sim.advise_search import advise
from pxn.tokens import Tokens

# A search that climbs over these budgets (a low seed, little evaluation noise).
CLIMBING = searched({"seed_score": 0.3, "eval_noise": 0.1}, budget=600)
BUDGETS = (150, 300, 600)


def grid(**changes) -> Ask:
    base = {
        "budget": BUDGETS,
        "p": (1, 2),
        "n": (1, 2),
        "b": (3,),
        "workers": (8,),
        "objective": "score",
        "replicates": 8,
    }
    return Ask(**(base | changes))


def bits(x) -> str:
    return repr(dataclasses.asdict(x.prediction))


def test_each_budgets_figures_are_those_of_an_ask_at_that_budget_alone() -> None:
    several = advise(CLIMBING, grid())
    assert len(several.assessments) == 4 * len(BUDGETS)
    for budget in BUDGETS:
        alone = advise(CLIMBING, grid(budget=budget))
        mine = {x.allocation.setup: x for x in several.assessments if x.budget == budget}
        assert {x.allocation: bits(x) for x in alone.assessments} == {
            a: bits(x) for a, x in mine.items()
        }


def test_racing_across_budgets_gives_the_full_grids_answer(monkeypatch) -> None:
    the_ask = grid(p=(1, 2, 4), n=(1, 2), b=(1, 3), replicates=20)
    full = advise(CLIMBING, the_ask)
    monkeypatch.setattr(advise_module, "FULL_GRID_MAX", 4)
    monkeypatch.setattr(advise_module, "SCORE_RACE_ROUNDS", (6,))
    raced = advise(CLIMBING, the_ask)
    assert raced.search.startswith("raced 12 allocations at 3 budgets")
    assert ": 6 replicates each, then the" in raced.search
    assert raced.recommended.allocation == full.recommended.allocation
    assert bits(raced.recommended) == bits(full.recommended)
    assert [x for x in raced.assessments if x.replicates == 6], "the race dropped nothing"


def test_the_best_score_is_the_largest_budgets_and_the_budgets_asked_bound_it() -> None:
    advice = advise(CLIMBING, grid())
    best = advice.recommended
    scores = {b: max(x.test_score.mean for x in advice.assessments if x.budget == b)
              for b in BUDGETS}  # fmt: skip
    assert scores[150] < scores[300] < scores[600]  # the search climbs with the budget
    assert best.budget == 600
    assert advice.bound_by.startswith("the budgets asked: B=600 is the largest")


def test_a_deadline_moves_the_recommendation_to_a_smaller_budget_and_says_so() -> None:
    free = advise(CLIMBING, grid())
    largest = [x for x in free.assessments if x.budget == 600]
    deadline = min(x.wall_clock.high for x in largest) * 0.9  # no allocation at 600 meets it
    advice = advise(CLIMBING, grid(deadline=deadline))
    best = advice.recommended
    assert best.budget < 600 and best.meets_deadline
    eligible = [x for x in advice.assessments if x.feasible]
    top = max(eligible, key=lambda x: x.test_score.mean)
    assert best is top or abs(best.versus(top, "score")[0]) <= 2 * best.versus(top, "score")[1]
    assert advice.bound_by.startswith("the deadline: the best score beyond them")
    beyond = max((x for x in advice.assessments if not x.feasible),
                 key=lambda x: x.test_score.mean)  # fmt: skip
    assert beyond.allocation.label in advice.bound_by


def test_a_target_score_gets_the_fastest_allocation_reaching_it_often_enough() -> None:
    advice = advise(CLIMBING, grid(objective="time", target_score=0.42, replicates=10))
    best = advice.recommended
    reaching = [x for x in advice.assessments if x.chance(0.42) >= TARGET_CHANCE]
    assert best in reaching and reaching != advice.assessments  # some do, some do not
    assert best.wall_clock.mean == min(x.wall_clock.mean for x in reaching)
    too_high = advise(CLIMBING, grid(objective="time", target_score=0.99, replicates=10))
    assert too_high.recommended is None
    [reason] = too_high.reasons
    chances = [x.chance(0.99) for x in too_high.assessments]
    assert reason.startswith("no allocation reaches a test score of 0.99 in 90% of simulated")
    assert f"the best chance found is {max(chances):.0%}" in reason


def test_a_target_score_with_objective_cost_is_the_cheapest_reaching_it() -> None:
    tokens = Tokens(fixed(100), fixed(20), fixed(300), 500.0, 120.0, measured_minibatch=3)
    priced = CLIMBING.replace(tokens=tokens, prices=Prices(1.0, 4.0, 2.0, 8.0))
    advice = advise(priced, grid(objective="cost", target_score=0.42, replicates=10))
    reaching = [x for x in advice.assessments if x.chance(0.42) >= TARGET_CHANCE]
    assert advice.recommended.dollars.mean == min(x.dollars.mean for x in reaching)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"objective": "time"}, "3 budgets are compared by the score they reach"),
        ({"target_score": 0.5}, "target score asks for the fastest allocation"),
        ({"objective": "time", "target_score": 1.5}, "target score must be in (0, 1]"),
        ({"budget": (100, 10)}, "budget 10 is smaller than one seed validation"),
    ],
)
def test_asks_that_cannot_be_answered_are_refused(changes, fragment) -> None:
    with pytest.raises(PxnError) as caught:
        advise(CLIMBING, grid(**changes))
    assert fragment in str(caught.value)


def test_a_target_needs_the_quality_model() -> None:
    rates = make_scenario(acceptance=Acceptance(0.3))
    with pytest.raises(PxnError, match="no \\[quality\\] model"):
        advise(rates, grid(objective="time", budget=400, target_score=0.5))


def test_budgets_past_the_cap_are_left_out_unsimulated_and_named() -> None:
    tokens = Tokens(fixed(1000), fixed(1000), fixed(300), 500.0, 120.0, measured_minibatch=3)
    priced = CLIMBING.replace(tokens=tokens, prices=Prices(1.0, 1.0, 1.0, 1.0))
    # Each metric call costs $0.002: B=600 alone is $1.20, past a $1 cap; 300 is $0.60.
    advice = advise(priced, grid(max_dollars=1.0))
    assert {x.budget for x in advice.assessments} == {150, 300}
    assert advice.notes[0].startswith("B=600 not simulated: no allocation fits $1.00")
    one_left = advise(priced, grid(max_dollars=0.5))
    assert {x.budget for x in one_left.assessments} == {150}
    assert advice_report(one_left).shown[0].startswith("small: B=150 metric calls")
    refused = advise(priced, grid(max_dollars=0.2))
    assert refused.assessments == [] and "B=150 metric calls alone cost $0.30" in refused.reasons[0]


def test_one_budget_asks_as_before() -> None:
    """A tuple of one budget is the ask of that budget: the same allocations and figures."""
    one = advise(CLIMBING, grid(budget=(300,)))
    plain = advise(CLIMBING, grid(budget=300))
    assert [x.allocation.label for x in one.assessments] == [
        x.allocation.label for x in plain.assessments
    ]
    assert [bits(x) for x in one.assessments] == [bits(x) for x in plain.assessments]
    assert one.bound_by is None and "B=" not in one.assessments[0].allocation.label


# -- through the API and the CLI ----------------------------------------------------------


def dspy_scenario(tmp_path: Path) -> Path:
    data = CLIMBING.to_dict() | {"optimizer": "dspy.GEPA", "reflection_concurrency": 1}
    data |= {"budget": "auto:light", "predictors": 1, "valset_size": 20}
    path = tmp_path / "dspy.toml"
    Scenario.from_dict(data).save(path)
    return path


def test_a_dspy_scenarios_budgets_hold_dspys_auto_levels(tmp_path: Path) -> None:
    path = dspy_scenario(tmp_path)
    result = api_advise(path, budget="200..1000", p=1, n="1,2", objective="score", reps=3)
    names = result.advice.ask.budget_names
    # V=20, one predictor: DSPy's light, medium and heavy budgets are 460, 790 and 1175.
    assert names == {200: "200", 400: "400", 460: "auto:light", 790: "auto:medium",
                     800: "800", 1000: "1000"}  # fmt: skip
    assert any("auto:heavy (B=1175)" in note for note in result.advice.notes)
    assert "460 (auto:light)" in str(result)


def test_the_cli_compares_budgets_and_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    CLIMBING.save(path)
    out = tmp_path / "o"
    ran = run_pxn(
        "advise", path, "--budget", "150..600", "--objective", "score", "--p", "1,2", "--n",
        "1", "--reps", "4", "--out", out,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "the best allocation at each budget" in ran.stdout and "bound by" in ran.stdout
    document = json.loads((out / "advise.json").read_text())
    assert document["ask"]["budget"] == [150, 300, 600] and "bound_by" in document
    header = (out / "advise.csv").read_text().splitlines()[0]
    assert header.startswith("budget,budget_given,p,n,b,workers")


def test_the_cli_defaults_to_the_scenarios_budget(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    CLIMBING.save(path)
    ran = run_pxn("advise", path, "--p", "1", "--n", "1", "--reps", "2", "--format", "json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["ask"]["budget"] == CLIMBING.budget


def test_a_budget_too_small_to_search_is_warned_of_before_simulating(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    CLIMBING.save(path)
    ran = run_pxn(
        "advise", path, "--budget", "21,30,300", "--objective", "score", "--p", "1,2", "--n",
        "1", "--reps", "2", "--min-proposals", "4",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    warning = (
        "pxn: warning: B=30 affords at most 2 proposals after the seed's validation (V=20 "
        "metric calls, then at least 2kb = 6 an iteration of k=1 proposals at b=3): "
        "4 proposals need B >= 39 (and 1 smaller budget(s) asked afford fewer)"
    )
    assert ran.stderr.splitlines()[0] == warning
    assert "B=30 affords at most 2 proposals" in ran.stdout  # and in the report


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--budget", "4000..1000"], "--budget '4000..1000' runs from a larger budget"),
        (["--budget", "100,200"], "--budget 2 budgets are compared by the score they reach"),
        (["--target-score", "2", "--budget", "300"], "--target-score must be in (0, 1]"),
        (["--min-proposals", "0"], "--min-proposals must be a whole number >= 1"),
    ],
)
def test_cli_bad_budget_asks_are_one_line(tmp_path: Path, args, fragment) -> None:
    path = tmp_path / "s.toml"
    CLIMBING.save(path)
    assert_user_error(run_pxn("advise", path, *args), fragment)


def test_the_ask_lists_its_budgets_in_order() -> None:
    the_ask = grid(budget=(600, 150, 300, 150))
    assert the_ask.budgets == (150, 300, 600) and the_ask.several_budgets
    assert len(the_ask.allocations()) == 12 and the_ask.grid_size == 4
    assert replace(the_ask, budget=300).allocations()[0].budget is None
