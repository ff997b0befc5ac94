"""Allocations judged against each other: the race's cut after a round (the allocations
that could still be the answer: not clearly infeasible, not clearly behind the leader,
for a score not clearly slower than one scoring as well), and the ranking of those
assessed in full: the recommendation and its ties, what bound a score across budgets,
why nothing is feasible when nothing is.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from scipy.stats import binom

from pxn.durations import format_duration, format_span
from pxn.scenario import Scenario
from pxn.sim.advise import TARGET_CHANCE, Advice, Allocation, Ask, Assessment
from pxn.sim.predict import Interval, draw_notes, optimizer_notes

NOISE = 2.0  # standard errors of a difference within which two allocations tie
RACE_MARGIN = 3.0  # standard errors an allocation may trail the leader by and stay in
# A race drops an allocation whose runs missed the target so often that a chance of
# TARGET_CHANCE would give so many misses less often than this.
TARGET_RACE_SIGNIFICANCE = 0.001


def decide(ask: Ask, scenario: Scenario, search: str, assessments: list[Assessment]) -> Advice:
    """Rank, recommend, name the ties, or say why nothing is feasible."""
    complete = [x for x in assessments if x.replicates == ask.replicates]

    def key(x: Assessment) -> tuple[bool, float, float]:
        time = x.wall_clock.mean
        return (not x.eligible, x.objective(ask.objective)[0], time)

    ranked = sorted(assessments, key=lambda x: (x.replicates != ask.replicates, *key(x)))
    notes = dict.fromkeys(note for x in complete for note in prediction_notes(x))
    advice = Advice(ask, scenario, search, ranked, notes=list(notes))
    feasible = sorted((x for x in complete if x.eligible), key=key)
    if not feasible:
        advice.reasons = infeasibility_reasons(ask, complete or assessments)
        return advice
    best = feasible[0]
    ties = [x for x in feasible[1:] if tied(x, best, ask.objective)]
    if ask.objective == "score" and ties:  # scores that cannot be told apart: the fastest
        best, *ties = sorted([best, *ties], key=lambda x: x.wall_clock.mean)
        advice.notes.append(
            f"{len(ties) + 1} allocations reach an expected test score within noise of the "
            "best; the fastest of them is recommended"
        )
        # Listed as decided: the recommendation, its ties by time, then the rest as ranked.
        first = [best, *ties]
        advice.assessments = first + [x for x in ranked if all(x is not y for y in first)]
    advice.recommended, advice.runners_up = best, ties
    if ask.several_budgets and ask.objective == "score":
        advice.bound_by = what_bound(ask, best, complete)
    return advice


def prediction_notes(x: Assessment) -> tuple[str, ...]:
    """The notes x's Prediction carries, without making it."""
    draws = 0 if x.scenario.uncertainty is None else len(x.scenario.uncertainty)
    return draw_notes(draws, x.replicates) + optimizer_notes(x.scenario, x.allocation.shape)


def tied(x: Assessment, best: Assessment, objective: str) -> bool:
    """Within noise of the best: the paired difference is within NOISE standard errors."""
    difference, se = x.versus(best, objective)
    return abs(difference) <= NOISE * se


def what_bound(ask: Ask, best: Assessment, complete: list[Assessment]) -> str:
    """What kept the recommended score from a better one: a constraint, the budgets asked,
    or nothing (a larger budget scores within noise of it)."""
    score = best.test_score.mean
    better = [x for x in complete if not x.feasible and x.test_score.mean > score]
    if better:
        top = max(better, key=lambda x: x.test_score.mean)
        broken, past = [], []
        if top.meets_deadline is False:
            broken.append("the deadline")
            past.append(f"takes {format_duration(top.wall_clock.high)}")
        if top.within_cap is False:
            broken.append("the dollar cap")
            past.append(f"costs ${top.dollars.high:,.2f}")
        gain, se = top.versus(best, "score")
        noise = "within noise" if abs(gain) <= NOISE * se else "beyond noise"
        return (
            f"{' and '.join(broken)}: the best score beyond them, {score_text(top.test_score)} "
            f"at {top.allocation.label}, {' and '.join(past)} at the 95th percentile; "
            f"{-gain:+.3f} over the recommendation (paired standard error {se:.3f}: {noise})"
        )
    if best.budget == ask.budgets[-1]:
        return (
            f"the budgets asked: {ask.budget_label(best.budget)} is the largest, and a larger "
            "one may score higher"
        )
    return "nothing: the larger budgets asked score within noise of it, or lower"


def score_text(interval: Interval) -> str:
    """A score interval as a person reads it: 0.712 [0.680-0.741]."""
    return f"{interval.mean:.3f} [{interval.low:.3f}-{interval.high:.3f}]"


def infeasibility_reasons(ask: Ask, assessments: list[Assessment]) -> list[str]:
    reasons = []
    # The closest to feasible: the lowest 95th percentile.
    closest = min(assessments, key=lambda x: x.wall_clock.high)
    if ask.deadline is not None and closest.meets_deadline is False:
        w = closest.wall_clock
        reasons.append(
            f"no allocation meets the {format_duration(ask.deadline)} deadline in 95% of "
            f"simulated runs: the closest, {closest.allocation.label}, takes "
            f"{format_duration(w.mean)} [{format_span(w.low, w.high)}]"
        )
    if ask.max_dollars is not None:
        closest = min(assessments, key=lambda x: x.dollars.high)
        d = closest.dollars
        if closest.within_cap is False:
            reasons.append(
                f"no allocation fits ${ask.max_dollars:,.2f} in 95% of simulated runs: the "
                f"closest, {closest.allocation.label}, costs ${d.mean:,.2f} "
                f"[{d.low:,.2f}-{d.high:,.2f}]"
            )
    if not reasons and any(x.feasible for x in assessments):  # none reaches the target
        reasons.append(target_refusal(ask, assessments))
    elif not reasons:  # each constraint alone can be met, not both at once
        on_time = [x for x in assessments if x.meets_deadline]
        cheapest = min(on_time, key=lambda x: x.dollars.mean)
        reasons.append(
            f"the allocations that meet the deadline all cost more than "
            f"${ask.max_dollars:,.2f}: the cheapest of them, {cheapest.allocation.label}, "
            f"costs ${cheapest.dollars.mean:,.2f} "
            f"(95th percentile ${cheapest.dollars.high:,.2f})"
        )
    return reasons


def target_refusal(ask: Ask, assessments: list[Assessment]) -> str:
    """No allocation that meets the constraints reaches the target often enough: the best
    chance found, and where."""
    target = ask.target_score
    assert target is not None
    feasible = [x for x in assessments if x.feasible] or assessments
    best = max(feasible, key=lambda x: (x.chance(target), x.test_score.mean))
    limits = [what for what, limit in (("the deadline", ask.deadline),
              ("the cap", ask.max_dollars)) if limit is not None]  # fmt: skip
    within = f" within {' and '.join(limits)}" if limits else ""
    return (
        f"no allocation reaches a test score of {target:g} in {TARGET_CHANCE:.0%} of simulated "
        f"runs{within}: the best chance found is {best.chance(target):.0%}, "
        f"{best.allocation.label} (test score {score_text(best.test_score)})"
    )


def race(assessments: list[Assessment], ask: Ask) -> list[Allocation]:
    """The allocations that could still be the answer after the first round."""

    def possible(x: Assessment) -> bool:  # not yet clearly infeasible
        late = ask.deadline is not None and x.wall_clock.low > ask.deadline
        dear = (
            ask.max_dollars is not None
            and x.dollars is not None
            and x.dollars.low > ask.max_dollars
        )
        return not (late or dear or misses_target(x, ask))

    alive = [x for x in assessments if possible(x)]
    if not alive:
        return []
    objective = ask.objective
    leaders = [x for x in alive if x.eligible]
    if ask.target_score is not None and not leaders:
        return [x.allocation for x in alive]  # none reaches the target yet: none leads
    leader = min(leaders or alive, key=lambda x: x.objective(objective)[0])

    def could_win(x: Assessment) -> bool:  # not behind the leader by more than the margin
        behind, se = x.versus(leader, objective)
        return behind <= RACE_MARGIN * se

    contenders = [x for x in alive if could_win(x)]
    if objective == "score":  # of those tied on score the fastest wins (decide)
        out = outpaced(contenders)
        contenders = [x for x, gone in zip(contenders, out, strict=True) if not gone]
    return [x.allocation for x in contenders]


def misses_target(x: Assessment, ask: Ask) -> bool:
    """Whether x's runs missed the target too often for a chance of TARGET_CHANCE."""
    if ask.target_score is None:
        return False
    misses = round((1 - x.chance(ask.target_score)) * x.replicates)
    return misses >= too_many_misses(x.replicates)


@cache
def too_many_misses(replicates: int) -> int:
    """The fewest misses of the target in `replicates` runs that a chance of TARGET_CHANCE
    gives less often than TARGET_RACE_SIGNIFICANCE."""
    return next(
        m
        for m in range(replicates + 2)
        if binom.sf(m - 1, replicates, 1 - TARGET_CHANCE) < TARGET_RACE_SIGNIFICANCE
    )


def outpaced(xs: list[Assessment]) -> list[bool]:
    """For each x, whether another allocation scores at least as well on average and is
    clearly faster: then x can be neither the best score nor the fastest of those tied with
    it. Each x against all the others at once (its paired differences as rows)."""
    if not xs:
        return []
    n = min(x.replicates for x in xs)
    times = np.array([x.wall_clocks[:n] for x in xs])
    scores = np.array([x.test_score.mean for x in xs])
    gone = []
    for i in range(len(xs)):
        others = scores >= scores[i]
        others[i] = False
        if not others.any():
            gone.append(False)
            continue
        slower = times[i] - times[others]  # x's wall-clock less each other's, run by run
        mean = slower.mean(axis=1)
        se = slower.std(axis=1, ddof=1) / math.sqrt(n)
        gone.append(bool(np.any(mean > RACE_MARGIN * se)))
    return gone
