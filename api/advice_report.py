"""Advice as a person reads it (a recommendation and a table) and as a program does."""

from __future__ import annotations

from typing import Any

from pxn.api.prediction_report import extrapolation_warning
from pxn.api.report import Note, Report, interval_columns
from pxn.api.tables import Column, Grid
from pxn.durations import format_duration, format_span
from pxn.sim.advise import TARGET_CHANCE, Advice, Ask, Assessment
from pxn.sim.advise_ranking import score_text

CAVEAT = (
    "Ranked by wall-clock and dollars at a fixed budget of metric calls. The scenario has "
    "no [quality] model, so which allocation finds the better candidate is not predicted: "
    "weigh iterations (how often the search adapts) and proposals yourself."
)
SCORED = (
    "Scores are the quality model's: test is the chosen candidate's expected score on "
    "fresh examples; best val its mean validation score, optimistic by the selection."
)
SHOWN = 12  # rows of the printed table; the CSV has every allocation
RUNNERS_UP = 4  # allocations within noise of the recommendation described in full


def money(value: float) -> str:
    return f"${value:,.2f}" if value < 1000 else f"${value:,.0f}"


def headline(advice: Advice) -> list[str | Note]:
    """The ask, how it was searched, and the caveat (prose, wrapped to the terminal)."""
    ask = advice.ask
    asked = [f"{budgets_asked(ask)} metric calls", f"objective: {ask.objective}"]
    if ask.target_score is not None:
        asked.append(f"target test score {ask.target_score:g} in {TARGET_CHANCE:.0%} of runs")
    if ask.deadline is not None:
        asked.append(f"deadline {format_duration(ask.deadline)}")
    if ask.max_dollars is not None:
        asked.append(f"at most {money(ask.max_dollars)}")
    return [
        f"{advice.scenario.name}: " + ", ".join(asked),
        f"search: {advice.search}",
        *([Note(caveat(advice))] if advice.assessments else []),  # of a ranking, when there is one
    ]


def budgets_asked(ask: Ask) -> str:
    """B=5000, or each budget compared, as given: B=500, 780 (auto:light), 1000."""
    if not ask.several_budgets:
        return f"B={ask.budgets[0]}"
    return "B=" + ", ".join(ask.budget_label(b).removeprefix("B=") for b in ask.budgets)


def caveat(advice: Advice) -> str:
    return CAVEAT if advice.scenario.quality is None else SCORED


def describe(x: Assessment) -> str:
    """One allocation in one line."""
    p = x.prediction
    w = p.wall_clock
    parts = [f"{format_duration(w.mean)} [{format_span(w.low, w.high)}]"]
    if p.dollars is not None:
        parts.append(f"{money(p.dollars.mean)} [{money(p.dollars.low)}-{money(p.dollars.high)}]")
    if p.test_score is not None:
        parts.append(f"test score {score_text(p.test_score)}")
    if x.ask.target_score is not None:
        parts.append(f"reaches {x.ask.target_score:g} in {x.chance(x.ask.target_score):.0%}")
    parts += [
        f"{p.iterations.mean:.0f} iterations",
        f"{p.proposals.mean:.0f} proposals",
        f"full-val {p.full_val_share.mean:.0%}",
        *(
            [f"parameters {p.wall_clock_split.parameter_share:.0%} of its spread"]
            if p.wall_clock_split is not None
            else []
        ),
        *([f"{p.throttled_share.mean:.0%} of calls throttled"] if p.rate_limited else []),
        f"limited by {x.limited_by}",
    ]
    return f"{x.allocation.label}: " + ", ".join(parts)


def feasibility(advice: Advice) -> str:
    """What 'feasible' meant for this ask, for the table's caption."""
    ask = advice.ask
    asked = (("the deadline", ask.deadline), ("the cap", ask.max_dollars))
    limits = [name for name, limit in asked if limit is not None]
    return f"; feasible: 95th percentile within {' and '.join(limits)}" if limits else ""


def recommendation(advice: Advice) -> list[str | Note]:
    """The recommended allocation and those within noise of it, a paragraph each."""
    if advice.recommended is None:
        return []
    lines: list[str | Note] = ["", Note(describe(advice.recommended), label="recommended")]
    if advice.bound_by is not None:
        lines.append(Note(advice.bound_by, label="bound by"))
    lines += [Note(describe(x), label="  within noise") for x in advice.runners_up[:RUNNERS_UP]]
    if len(advice.runners_up) > RUNNERS_UP:
        more = len(advice.runners_up) - RUNNERS_UP
        lines.append(f"  and {more} more within noise ('tie' in the table and the CSV)")
    return lines


def advice_table(advice: Advice) -> Grid:
    ties = {id(x) for x in advice.runners_up}
    priced = advice.scenario.prices is not None
    scored = advice.scenario.quality is not None
    target = advice.ask.target_score
    grid = Grid(
        title=(
            f"best {SHOWN} of {len(advice.assessments)} allocations (every one in advise.csv)"
            if len(advice.assessments) > SHOWN
            else f"all {len(advice.assessments)} allocations"
        ),
        columns=[
            Column("", left=True),
            Column("allocation", left=True),
            Column("wall-clock"),
            Column("5-95%", rank=1 if target else 0),  # with a target, its chance first
            *([Column("dollars")] if priced else []),
            *([Column("test score")] if scored else []),
            *([Column(f"reaches\n{target:g}", words=f"reaches {target:g}")] if target else []),
            Column("iterations", rank=1),
            Column("proposals", rank=2),
            Column("full-val", rank=2),
            Column("limited by", left=True, rank=1),
            Column("reps", rank=3, words="replicates"),
        ],
        caption="wall-clock"
        + (" and dollars" if priced else "")
        + (" and test score" if scored else "")
        + ": simulated mean [5-95%]"
        + (f"; reaches {target:g}: the share of runs whose test score does" if target else "")
        + feasibility(advice),
    )
    for x in advice.assessments[:SHOWN]:
        p = x.prediction
        mark = "best" if x is advice.recommended else "tie" if id(x) in ties else ""
        if not x.feasible:
            mark = "over"
        elif not x.eligible:
            mark = "short"  # misses the target score too often
        grid.add_row(
            mark,
            x.allocation.label,
            format_duration(p.wall_clock.mean),
            format_span(p.wall_clock.low, p.wall_clock.high),
            *([money(p.dollars.mean)] if priced else []),
            *([score_text(p.test_score)] if scored else []),
            *([f"{x.chance(target):.0%}"] if target else []),
            f"{p.iterations.mean:.1f}",
            f"{p.proposals.mean:.0f}",
            f"{p.full_val_share.mean:.0%}",
            x.limited_by,
            str(p.replicates),
        )
    return grid


def budgets_table(advice: Advice) -> Grid:
    """Per budget, the best allocation that meets the ask there: what each budget buys."""
    ask = advice.ask
    priced = advice.scenario.prices is not None
    target = ask.target_score
    grid = Grid(
        title="the best allocation at each budget",
        columns=[
            Column("", left=True),
            Column("budget", left=True),
            Column("allocation", left=True),
            Column("test score"),
            *([Column(f"reaches\n{target:g}", words=f"reaches {target:g}")] if target else []),
            Column("wall-clock"),
            Column("95%", rank=1, words="95th percentile"),
            *(
                [Column("dollars"), Column("95%\n$", rank=2, words="95th percentile $")]
                if priced
                else []
            ),
            Column("reps", rank=3, words="replicates"),
        ],
        caption=(
            f"at each budget, the {'fastest' if ask.objective == 'time' else 'cheapest'} "
            f"allocation reaching {target:g} in {TARGET_CHANCE:.0%} of runs"
            if target
            else "at each budget, the highest expected test score"
        )
        + " among the allocations that meet the ask (over: none meets the deadline or the cap"
        + (", short: none reaches the target" if target else "")
        + "; the best score shown); best: the recommendation",
    )
    for budget in ask.budgets:
        at = [x for x in advice.assessments if x.budget == budget]
        full = [x for x in at if x.replicates == ask.replicates] or at
        meeting = [x for x in full if x.eligible]
        if meeting and target is not None:  # the fastest or cheapest reaching it
            x = min(meeting, key=lambda y: y.objective(ask.objective)[0])
        else:
            x = max(meeting or full, key=lambda y: (y.test_score.mean, -y.wall_clock.mean))
        mark = "best" if x is advice.recommended else "" if meeting else "short"
        if not meeting and not any(y.feasible for y in full):
            mark = "over"
        w, d = x.wall_clock, x.dollars
        grid.add_row(
            mark,
            ask.budget_label(budget).removeprefix("B="),
            x.allocation.setup.label,
            score_text(x.test_score),
            *([f"{x.chance(target):.0%}"] if target else []),
            format_duration(w.mean),
            format_duration(w.high),
            *([money(d.mean), money(d.high)] if priced else []),
            str(x.replicates),
        )
    return grid


def assessment_row(advice: Advice, x: Assessment) -> dict[str, Any]:
    p, a = x.prediction, x.allocation
    ties = {id(t) for t in advice.runners_up}
    row: dict[str, Any] = {"p": a.p, "n": a.n, "b": a.b, "workers": a.workers}
    if advice.ask.several_budgets:
        row = {"budget": x.budget, "budget_given": advice.ask.budget_names.get(x.budget)} | row
    row["recommended"] = x is advice.recommended
    row["within_noise_of_best"] = id(x) in ties
    row["feasible"] = x.feasible
    row["meets_deadline"] = x.meets_deadline
    row["within_cap"] = x.within_cap
    row["limited_by"] = x.limited_by
    row["replicates"] = p.replicates
    row |= interval_columns("wall_clock", p.wall_clock, "_s")
    row["wall_clock_se_s"] = x.wall_clock_se
    split = p.wall_clock_split
    row["wall_clock_parameter_share"] = None if split is None else split.parameter_share
    row |= interval_columns("dollars", p.dollars)
    row["dollars_se"] = x.dollars_se
    row |= interval_columns("best_score", p.best_score)
    row |= interval_columns("test_score", p.test_score)
    row["test_score_se"] = None if x.test_scores is None else x.objective("score")[1]
    if advice.ask.target_score is not None:
        row["target_chance"] = x.chance(advice.ask.target_score)
    row["iterations_mean"] = p.iterations.mean
    row["proposals_mean"] = p.proposals.mean
    row["full_val_share_mean"] = p.full_val_share.mean
    row["metric_calls_mean"] = p.metric_calls.mean
    row["utilisation_mean"] = p.utilisation.mean
    row["throttled_share_mean"] = p.throttled_share.mean
    row["analytic_wall_clock_s"] = p.analytic.wall_clock
    row["bound_s"] = p.analytic.bound
    row["rate_bound_s"] = p.analytic.rate_bound
    return row


def advice_document(advice: Advice) -> dict[str, Any]:
    ask = advice.ask
    new = {} if ask.target_score is None else {"target_score": ask.target_score}
    found = {} if advice.bound_by is None else {"bound_by": advice.bound_by}
    return {
        "scenario": advice.scenario.to_dict(),
        "ask": {
            "budget": list(ask.budgets) if ask.several_budgets else ask.budgets[0],
            "p": list(ask.p),
            "n": list(ask.n),
            "b": list(ask.b),
            "workers": list(ask.workers),
            "deadline_s": ask.deadline,
            "max_dollars": ask.max_dollars,
            "objective": ask.objective,
            "replicates": ask.replicates,
            **new,
        },
        "search": advice.search,
        "caveat": caveat(advice),
        "recommended": None if advice.recommended is None else advice.recommended.allocation.label,
        "runners_up": [x.allocation.label for x in advice.runners_up],
        **found,
        "infeasible_because": advice.reasons,
        "notes": advice.notes,
        "allocations": [assessment_row(advice, x) for x in advice.assessments],
    }


def advice_report(advice: Advice) -> Report:
    """The ask, the recommendation and the allocations, in every form."""
    shown: list = [*headline(advice), *recommendation(advice)]
    if advice.assessments and advice.ask.several_budgets:
        shown.append(budgets_table(advice))
    if advice.assessments:
        shown.append(advice_table(advice))
    shown += [Note(note) for note in advice.notes]
    if advice.assessments:
        at_budget = advice.scenario.replace(budget=advice.ask.budgets[-1])
        warning = extrapolation_warning(at_budget, [x.prediction for x in advice.assessments])
        shown += [] if warning is None else [warning]
    return Report(
        name="advise",
        shown=shown,
        rows=[assessment_row(advice, x) for x in advice.assessments],
        document=advice_document(advice),
    )
