"""The ranking: the allocations assessed in full ranked by the objective, the
recommendation and the allocations tied with it, what bound a score across budgets, and
why nothing is feasible when nothing is.
"""

from __future__ import annotations

from pxn.durations import format_duration, format_span
from pxn.scenario import Scenario
from pxn.sim.advise import TARGET_CHANCE, Advice, Ask, Assessment
from pxn.sim.predict import Interval, draw_notes, optimizer_notes

NOISE = 2.0  # standard errors of a difference within which two allocations tie


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
