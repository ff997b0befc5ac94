"""An ask refused before any simulation: a question that cannot be answered
(check_ask), and the budgets at which no allocation can meet the deadline or the dollar
cap, from lower bounds alone (the closed form's scaling and rate bounds, the calls' cost).
"""

from __future__ import annotations

import math

from pxn.acceptance import Acceptance
from pxn.durations import format_duration
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.sim.advise import MAX_GRID, OBJECTIVES, Allocation, Ask, at_smaller, variants
from pxn.sim.analytic import analytic


def check_ask(scenario: Scenario, ask: Ask) -> None:
    """Refuse an ask that cannot be answered, before any simulation."""
    if ask.objective not in OBJECTIVES:
        raise PxnError(f"is time, cost or score: got {ask.objective!r}", subject="objective")
    scored = ask.objective == "score" or ask.target_score is not None
    if scored and scenario.quality is None:
        raise PxnError(
            "the scenario has no [quality] model, so the score a search reaches cannot be "
            "predicted: calibrate from traces that record scores, or add a [quality] table"
        )
    if ask.target_score is not None:
        if not (0 < ask.target_score <= 1):
            raise PxnError(f"must be in (0, 1]: got {ask.target_score:g}", subject="target score")
        if ask.objective == "score":
            raise PxnError(
                "asks for the fastest allocation reaching it (objective time) or the "
                "cheapest (objective cost), not the best score",
                subject="target score",
            )
    elif ask.several_budgets and ask.objective != "score":
        raise PxnError(
            f"{len(ask.budgets)} budgets are compared by the score they reach: the fastest "
            "and cheapest run is always the smallest budget; ask for the best score, or the "
            "fastest or cheapest run reaching a target score",
            subject="budget",
        )
    if ask.replicates < 2:
        raise PxnError(f"must be >= 2 to give an interval: got {ask.replicates}",
                       subject="replicates")  # fmt: skip
    if ask.grid_size > MAX_GRID:
        raise PxnError(
            f"the grid holds {ask.grid_size:,} allocations ({len(ask.p)} P x {len(ask.n)} N x "
            f"{len(ask.b)} b x {len(ask.workers)} W), more than the {MAX_GRID:,} searched: "
            "narrow the ranges"
        )
    if ask.deadline is not None and ask.deadline <= 0:
        raise PxnError(f"must be positive: got {ask.deadline:g} s", subject="deadline")
    if ask.max_dollars is not None and ask.max_dollars <= 0:
        raise PxnError(f"must be positive: got {ask.max_dollars:g}", subject="dollar cap")
    if scenario.prices is None and (ask.max_dollars is not None or ask.objective == "cost"):
        raise PxnError(
            "the scenario has no [prices], so dollars cannot be predicted: add a [prices] "
            "table (or calibrate with a task model) before asking for a dollar cap or cost"
        )
    if max(ask.b) > scenario.trainset_size:
        raise PxnError(
            f"{max(ask.b)} is larger than the trainset ({scenario.trainset_size} examples)",
            subject="b",
        )
    for budget in ask.budgets:
        scenario.replace(budget=budget)  # the budget's own checks (one seed validation)


def bound_reasons(scenario: Scenario, ask: Ask) -> list[str]:
    """Why no allocation can meet the ask, from lower bounds alone (empty: it may): the
    smallest budget's reasons, as every larger budget's bounds are higher."""
    smallest = ask.budgets[0]
    return budget_bound_reasons(scenario, ask, variants(scenario, ask, smallest), smallest)


def unreachable_budgets(
    scenario: Scenario, ask: Ask, largest: dict[Allocation, Scenario]
) -> dict[int, list[str]]:
    """The budgets at which no allocation can meet the ask, from lower bounds alone, with
    why; `largest`: each setup's scenario at the largest budget."""
    refused: dict[int, list[str]] = {}
    for budget in ask.budgets:
        at = largest if budget == ask.budgets[-1] else at_smaller(largest, budget)
        reasons = budget_bound_reasons(scenario, ask, at, budget)
        if reasons:
            refused[budget] = reasons
    return refused


def budget_bound_reasons(
    scenario: Scenario, ask: Ask, variant: dict[Allocation, Scenario], budget: int
) -> list[str]:
    """Why no allocation can meet the ask at this budget (each setup's scenario at it in
    `variant`), from lower bounds alone."""
    reasons = []
    if ask.deadline is not None:
        best_w, best_bound = min(ask.workers), math.inf
        # The strong-scaling bound depends on W alone; the rate bound counts
        # reflections too, which differ by shape and b: the lowest is the bound.
        for a, at in variant.items():
            # Under the quality model, every proposal accepted: the fewest iterations, so
            # the fewest reflections, and still a lower bound.
            every = Acceptance(1.0) if at.acceptance is None else None
            bounds = analytic(at, a.shape, every)
            bound = max(bounds.bound, bounds.rate_bound)
            if bound < best_bound:
                best_w, best_bound, which = a.workers, bound, bounds
        if best_bound > ask.deadline:
            what = (
                "the strong-scaling bound B*T_e/W"
                if which.bound >= which.rate_bound
                else "the provider rate limit's bound"
            )
            reasons.append(
                f"no allocation meets the {format_duration(ask.deadline)} deadline: even at "
                f"W={best_w}, {what} alone is {format_duration(best_bound)} "
                f"(B={budget} metric calls)"
            )
    if ask.max_dollars is not None:
        floor = budget * scenario.mean_call_dollars("task")
        if floor > ask.max_dollars:
            reasons.append(
                f"no allocation fits ${ask.max_dollars:,.2f}: the B={budget} metric calls "
                f"alone cost ${floor:,.2f} at the scenario's mean tokens and prices"
            )
    return reasons
