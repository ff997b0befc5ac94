"""What `advise` asks and answers: the grid of allocations (P, N, b, W and the
budgets) with its constraints and objective, the scenario each allocation runs, an
allocation's replicates judged against the ask (Assessment), and the Advice.

An ask is refused before any simulation when it cannot be answered (check_ask), and a
budget when no allocation can meet the deadline or the dollar cap at it, from lower bounds
alone (the closed form's scaling and rate bounds, the calls' cost). The search itself is
advise_search.py: it refuses, races and ranks (advise_ranking.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import product

import numpy as np

from pxn.acceptance import Acceptance
from pxn.durations import format_duration
from pxn.errors import PxnError
from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import analytic
from pxn.sim.predict import Interval, Prediction, summarize_replicates

OBJECTIVES = ("time", "cost", "score")
FULL_GRID_MAX = 64  # allocations simulated in full without racing
MAX_GRID = 10_000  # allocations an ask may hold: beyond, even listing them is slow
RACE_REPLICATES = 20  # replicates every allocation gets in the first round of a race
# A score race's rounds before the full count: scores are noisier than times, so the race
# keeps many to the end; the allocations far slower than one scoring as well are plain
# after a few replicates.
SCORE_RACE_ROUNDS = (10, 20)
NEAR = 0.9  # a constraint binds when the 95th percentile is past this share of it
THROTTLED = 0.05  # share of calls waiting for a rate limit above which it binds
SATURATED = 0.75  # worker utilisation above which the pool binds
REFLECTION_BOUND = 0.5  # share of the wall-clock in reflections above which they bind
TARGET_CHANCE = 0.9  # the share of runs that must reach a target score


@dataclass(frozen=True, order=True)
class Allocation:
    p: int
    n: int
    b: int
    workers: int
    budget: int | None = None  # B, where the ask compares budgets (None: its one budget)

    @property
    def shape(self) -> Shape:
        return Shape(self.p, self.n)

    @property
    def setup(self) -> Allocation:
        """The allocation without its budget: what one simulation runs."""
        return Allocation(self.p, self.n, self.b, self.workers)

    @property
    def label(self) -> str:
        shown = f"{self.p}x{self.n} b={self.b} W={self.workers}"
        return shown if self.budget is None else f"B={self.budget} {shown}"


@dataclass(frozen=True)
class Ask:
    """The question: a grid of allocations, the constraints, the objective.

    `budget` is one B or several to compare (then by score, or against a
    target score); `target_score` asks for the fastest (objective time) or
    cheapest (cost) allocation whose runs reach it at least TARGET_CHANCE of
    the time.
    """

    budget: int | tuple[int, ...]
    p: tuple[int, ...]
    n: tuple[int, ...]
    b: tuple[int, ...]
    workers: tuple[int, ...]
    deadline: float | None = None  # seconds
    max_dollars: float | None = None
    objective: str = "time"
    replicates: int = 100
    race: bool = True  # False: every allocation gets every replicate, however large the grid
    target_score: float | None = None
    # How each budget was given, where not in metric calls: {780: "auto:light"}.
    budget_names: dict[int, str] = field(default_factory=dict, compare=False)

    @property
    def budgets(self) -> tuple[int, ...]:
        """The budgets asked about, smallest first."""
        budget = self.budget
        return tuple(sorted(set(budget))) if isinstance(budget, tuple) else (budget,)

    @property
    def several_budgets(self) -> bool:
        return len(self.budgets) > 1

    @property
    def grid_size(self) -> int:
        """Allocations of P, N, b and W: each one simulation, whatever the budgets."""
        return len(self.p) * len(self.n) * len(self.b) * len(self.workers)

    @property
    def rounds(self) -> tuple[int, ...]:
        """The replicates an allocation has after each round: all of them at once, or a
        race's rounds, the last to the full count."""
        if not (self.race and self.grid_size > FULL_GRID_MAX):
            return (self.replicates,)
        scored = self.objective == "score" or self.target_score is not None
        early = SCORE_RACE_ROUNDS if scored else (RACE_REPLICATES,)
        return (*(r for r in early if r < self.replicates), self.replicates)

    @property
    def first_round(self) -> int:
        """Replicates every allocation gets: all of them, or a race's first round."""
        return self.rounds[0]

    def setups(self) -> list[Allocation]:
        """The allocations of P, N, b and W, without budgets."""
        grid = product(self.workers, self.b, self.p, self.n)
        return [Allocation(p, n, b, w) for w, b, p, n in grid]

    def allocations(self) -> list[Allocation]:
        """Every setup at every budget (its budget None when the ask has one)."""
        return [at_budget(self, a, budget) for budget in self.budgets for a in self.setups()]

    def budget_of(self, allocation: Allocation) -> int:
        return self.budgets[0] if allocation.budget is None else allocation.budget

    def budget_label(self, budget: int) -> str:
        """B as a person reads it: "B=780 (auto:light)", "B=2000"."""
        name = self.budget_names.get(budget)
        return f"B={budget}" + ("" if name is None or name == str(budget) else f" ({name})")


@dataclass(frozen=True, eq=False)
class Assessment:
    """One allocation's replicates, judged against the ask.

    What the race and the ranking read is worked out at once; the full
    Prediction when first asked for (a large grid has thousands of
    allocations, and a report shows a few).
    """

    allocation: Allocation
    scenario: Scenario  # as this allocation runs: its budget, b and W
    runs: tuple[RunSummary, ...]  # replicate r's at index r
    ask: Ask

    @cached_property
    def wall_clocks(self) -> tuple[float, ...]:
        return tuple(r.wall_clock for r in self.runs)

    @cached_property
    def dollar_values(self) -> tuple[float, ...] | None:
        dollars = tuple(r.dollars for r in self.runs)
        return None if None in dollars else dollars

    @cached_property
    def test_scores(self) -> tuple[float, ...] | None:
        """The quality model's expected test score of each run's chosen candidate."""
        return None if self.scenario.quality is None else tuple(r.test_score for r in self.runs)

    @cached_property
    def wall_clock(self) -> Interval:
        return Interval.of(self.wall_clocks)

    @cached_property
    def dollars(self) -> Interval | None:
        return None if self.dollar_values is None else Interval.of(self.dollar_values)

    @cached_property
    def test_score(self) -> Interval | None:
        return None if self.test_scores is None else Interval.of(self.test_scores)

    @property
    def replicates(self) -> int:
        return len(self.runs)

    @property
    def budget(self) -> int:
        return self.ask.budget_of(self.allocation)

    @cached_property
    def prediction(self) -> Prediction:
        return summarize_replicates(self.scenario, self.allocation.shape, list(self.runs), None)

    @property
    def wall_clock_se(self) -> float:
        """Standard error of the mean wall-clock."""
        return standard_error(self.wall_clocks)

    @property
    def dollars_se(self) -> float | None:
        return None if self.dollar_values is None else standard_error(self.dollar_values)

    @property
    def meets_deadline(self) -> bool | None:  # None: no deadline asked
        deadline = self.ask.deadline
        return None if deadline is None else self.wall_clock.high <= deadline

    @property
    def within_cap(self) -> bool | None:  # None: no dollar cap asked
        cap, dollars = self.ask.max_dollars, self.dollars
        return None if cap is None or dollars is None else dollars.high <= cap

    @property
    def feasible(self) -> bool:
        return self.meets_deadline is not False and self.within_cap is not False

    def chance(self, score: float) -> float:
        """The share of runs whose chosen candidate's test score reaches `score`."""
        assert self.test_scores is not None
        return sum(s >= score for s in self.test_scores) / len(self.test_scores)

    @property
    def reaches_target(self) -> bool | None:  # None: no target asked
        target = self.ask.target_score
        return None if target is None else self.chance(target) >= TARGET_CHANCE

    @property
    def eligible(self) -> bool:
        """Feasible and, when a target is asked, reaching it often enough."""
        return self.feasible and self.reaches_target is not False

    @cached_property
    def limited_by(self) -> str:
        """What sets this allocation's pace, and which constraint is near."""
        return limited_by(self.prediction, self.ask, self.scenario.optimizer)

    def objective(self, objective: str) -> tuple[float, float]:
        """(mean, standard error) of what the ask minimises (a score, negated)."""
        values = self.values(objective)
        return float(values.mean()), standard_error(values)

    def values(self, objective: str) -> np.ndarray:
        """What the ask minimises, replicate by replicate: the wall-clock, the dollars, or
        the chosen candidate's expected test score negated."""
        if objective == "cost":
            assert self.dollar_values is not None
            return np.asarray(self.dollar_values)
        if objective == "score":
            assert self.test_scores is not None
            return -np.asarray(self.test_scores)
        return np.asarray(self.wall_clocks)

    def versus(self, other: Assessment, objective: str) -> tuple[float, float]:
        """(mean, standard error) of this allocation's objective minus `other`'s, replicate r
        against replicate r, over the replicates both ran."""
        mine, theirs = self.values(objective), other.values(objective)
        n = min(len(mine), len(theirs))
        difference = mine[:n] - theirs[:n]
        return float(difference.mean()), standard_error(difference)


@dataclass
class Advice:
    ask: Ask
    scenario: Scenario
    search: str  # how the grid was searched, in a sentence
    assessments: list[Assessment] = field(default_factory=list)  # feasible first, best first
    recommended: Assessment | None = None
    runners_up: list[Assessment] = field(default_factory=list)  # within noise of it
    reasons: list[str] = field(default_factory=list)  # why nothing is feasible
    notes: list[str] = field(default_factory=list)  # about the replicates, e.g. too few per draw
    bound_by: str | None = None  # of a score across budgets: what kept it from a better one


def parse_values(text: str, what: str) -> tuple[int, ...]:
    """'1..8', '64,128,512' or a mix ('1..4,8'): whole numbers >= 1, in order."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:\s*\.\.\s*(\d+))?", part)
        if not match:
            raise PxnError(f"takes numbers and ranges like 1..8 or 64,128: got {text!r}",
                           subject=what)  # fmt: skip
        low, high = int(match[1]), int(match[2] or match[1])
        if low < 1 or high < low:
            raise PxnError(f"{part!r} is not a range of whole numbers >= 1", subject=what)
        values.extend(range(low, high + 1))
    return tuple(dict.fromkeys(values))


def at_budget(ask: Ask, setup: Allocation, budget: int) -> Allocation:
    """The setup at this budget, as the ask's allocations name it."""
    return replace(setup, budget=budget) if ask.several_budgets else setup


def variants(scenario: Scenario, ask: Ask, budget: int) -> dict[Allocation, Scenario]:
    """The scenario each setup runs at this budget: the budget, the setup's b and W."""
    return {
        a: scenario.replace(budget=budget, minibatch=a.b, workers=a.workers) for a in ask.setups()
    }


def all_variants(ask: Ask, largest: dict[Allocation, Scenario]) -> dict[Allocation, Scenario]:
    """The scenario of every allocation of the ask (every setup at every budget), from each
    setup's at the largest budget (`largest`)."""
    top = max(largest[a].budget for a in ask.setups())
    return {
        at_budget(ask, a, budget): scenario
        for budget in ask.budgets
        for a, scenario in (largest if budget == top else at_smaller(largest, budget)).items()
    }


def at_smaller(variant: dict[Allocation, Scenario], budget: int) -> dict[Allocation, Scenario]:
    """Each setup's scenario at a smaller budget. Made and validated once at the largest,
    it differs here in the budget alone, which check_ask has validated: a copy, not
    validated again (a grid of thousands would spend seconds on it)."""
    return {a: replace(scenario, budget=budget) for a, scenario in variant.items()}


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


def standard_error(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def limited_by(prediction: Prediction, ask: Ask, optimizer: str = "gepa") -> str:
    """What sets the pace (rate limit, worker pool, reflections or the chain of iterations),
    and near constraints; in the words of the `optimizer` that runs the loop (dspy.GEPA's
    reflections run one at a time, whatever its settings)."""
    wall_clock = prediction.wall_clock.mean
    reflecting = prediction.stage_time["reflection"] / wall_clock if wall_clock > 0 else 0.0
    if prediction.throttled_share.mean > THROTTLED:
        pace = "rate limit"
    elif prediction.utilisation.mean >= SATURATED:
        pace = "worker pool"
    elif reflecting >= REFLECTION_BOUND:
        pace = "reflections"  # the worker pool idles while the reflection LM thinks
        if optimizer == "dspy.GEPA":
            pace = "reflections, one at a time (dspy.GEPA: faster reflections shorten them)"
    else:
        pace = "iteration latency"  # stages narrower than the pool: a chain of iterations
    notes = []
    dollars = prediction.dollars
    for limit, high, what in (
        (ask.deadline, prediction.wall_clock.high, "the deadline"),
        (ask.max_dollars, None if dollars is None else dollars.high, "the dollar cap"),
    ):
        if limit is not None and high is not None and high > NEAR * limit:
            notes.append(f"{'past' if high > limit else 'near'} {what}")
    return "; ".join([pace, *notes])
