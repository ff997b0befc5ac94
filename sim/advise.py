"""Which allocation to run: P parents, N proposals each, minibatch b, W workers.

`advise` simulates every allocation of a grid at a metric-call budget, or
at several, and ranks those that meet the deadline and the dollar cap by the
objective: time, cost, or score (the chosen candidate's expected test score,
under a scenario's quality model). Asked for a target score instead, it
ranks by time or cost the allocations whose chance of reaching it is at
least TARGET_CHANCE. Allocations whose scores cannot be told apart
(within noise of the best, paired) are ranked by time: the fastest of them
is recommended. Without a quality model, which allocation finds the better
candidate is not predicted, and iterations (how often the search adapts)
and proposals are reported beside each allocation for the user to weigh.

A large grid is raced rather than simulated in full: every allocation gets
a few replicates, those that cannot win (clearly infeasible, or behind the
leader by more than three standard errors of the difference; for score,
also clearly slower than one that scores at least as well on average) are
dropped, and the rest get the full count. Replicate r of an allocation
always draws from its own stream, so a raced allocation's figures are those
a full simulation would give.

Several budgets cost one simulation per allocation of P, N, b and W (a
setup): a replicate runs to the largest budget still in question and every
smaller budget's run is its prefix (model.simulate_budgets), read off at
gepa's budget check. Budgets are compared by score (the fastest or cheapest
run is always the smallest budget); the recommendation says which
constraint kept it from a better score.

Replicate r of every allocation runs the same seed stream and, with parameter
uncertainty, the same parameter draw (r mod D). So allocations are compared
pair by pair: the difference of their replicate-r figures, whose standard
error leaves out what they share (above all a slow or fast draw of the
parameters), both in the race and in naming ties. Feasibility is judged on
the 95th percentile over all replicates, so a deadline or cap is met only if
it holds across the parameters' uncertainty too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from itertools import pairwise

import numpy as np
from scipy.stats import binom

from pxn.acceptance import Acceptance
from pxn.durations import format_duration, format_span
from pxn.errors import PxnError
from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import analytic
from pxn.sim.backends import Backend, LocalBackend, gather
from pxn.sim.predict import (
    CHUNK,
    Interval,
    Prediction,
    draw_notes,
    optimizer_notes,
    simulate_replicates_at,
    summarize_replicates,
)
from pxn.sim.workload import Cost, Work, estimate

OBJECTIVES = ("time", "cost", "score")
FULL_GRID_MAX = 64  # allocations simulated in full without racing
MAX_GRID = 10_000  # allocations an ask may hold: beyond, even listing them is slow
RACE_REPLICATES = 20  # replicates every allocation gets in the first round of a race
# A score race's rounds before the full count: scores are noisier than times, so the race
# keeps many to the end; the allocations far slower than one scoring as well are plain
# after a few replicates.
SCORE_RACE_ROUNDS = (10, 20)
RACE_MARGIN = 3.0  # standard errors an allocation may trail the leader by and stay in
NOISE = 2.0  # standard errors of a difference within which two allocations tie
NEAR = 0.9  # a constraint binds when the 95th percentile is past this share of it
THROTTLED = 0.05  # share of calls waiting for a rate limit above which it binds
SATURATED = 0.75  # worker utilisation above which the pool binds
REFLECTION_BOUND = 0.5  # share of the wall-clock in reflections above which they bind
TARGET_CHANCE = 0.9  # the share of runs that must reach a target score
# A race drops an allocation whose runs missed the target so often that a chance of
# TARGET_CHANCE would give so many misses less often than this.
TARGET_RACE_SIGNIFICANCE = 0.001


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
        return [
            Allocation(p, n, b, w)
            for w in self.workers
            for b in self.b
            for p in self.p
            for n in self.n
        ]

    def allocations(self) -> list[Allocation]:
        """Every setup at every budget (its budget None when the ask has one)."""
        if not self.several_budgets:
            return self.setups()
        return [replace(a, budget=budget) for budget in self.budgets for a in self.setups()]

    def budget_of(self, allocation: Allocation) -> int:
        return self.budgets[0] if allocation.budget is None else allocation.budget

    def budget_label(self, budget: int) -> str:
        """B as a person reads it: "B=780 (auto:light)", "B=2000"."""
        name = self.budget_names.get(budget)
        return f"B={budget}" + ("" if name is None or name == str(budget) else f" ({name})")


@dataclass(frozen=True, eq=False)
class Assessment:
    """One allocation's replicates, judged against the ask.

    What the race and the ranking read (the per-replicate figures, their
    intervals, feasibility) is worked out at once; the full Prediction (its
    stages, the closed form, the progress band) when first asked for: a
    large grid at several budgets has thousands of allocations and a report
    shows a few.
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


# -- reading the ask -----------------------------------------------------------


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


# -- bounds that refuse an ask without simulating ------------------------------


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


# -- the search ----------------------------------------------------------------


def advise(
    scenario: Scenario,
    ask: Ask,
    backend: Backend | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Advice:
    """Answer the ask; `on_progress(done, total)` is told as replicates finish.

    The work runs on `backend` (opened and closed by the caller), else in this
    process; the answer is the same to the bit.
    """
    check_ask(scenario, ask)
    largest = variants(scenario, ask, ask.budgets[-1])
    unreachable = unreachable_budgets(scenario, ask, largest)
    if len(unreachable) == len(ask.budgets):
        reasons = unreachable[ask.budgets[0]]
        return Advice(
            ask, scenario, "refused from bounds alone: nothing simulated", reasons=reasons
        )
    dropped = [
        f"{ask.budget_label(budget)} not simulated: {'; '.join(reasons)}"
        for budget, reasons in unreachable.items()
    ]
    if dropped:  # the rest, compared as asked
        ask = replace(ask, budget=tuple(b for b in ask.budgets if b not in unreachable))
    variant = all_variants(ask, largest)
    setups = ask.setups()
    allocations = ask.allocations()
    runs: dict[Allocation, list[RunSummary]] = {a: [] for a in allocations}
    named = {(a.setup, ask.budget_of(a)): a for a in allocations}  # (setup, B) -> allocation
    rounds = ask.rounds
    done, total = 0, len(setups) * rounds[0]

    def simulate(todo: dict[Allocation, int], replicates: range) -> None:
        """Replicates of each setup, to its budget: every budget up to it a prefix."""
        owners, units = work_units(variant, ask, todo, replicates)

        def told(_: int, batch: list) -> None:
            nonlocal done
            done += len(batch)
            if on_progress:
                on_progress(done, total)

        results = gather(backend or LocalBackend(), simulate_replicates_at, units, told)
        for (setup, budgets), batch in zip(owners, results, strict=True):
            kept = [runs[named[setup, budget]] for budget in budgets]
            for summaries in batch:  # a setup's chunks come in replicate order
                for runs_at, summary in zip(kept, summaries, strict=True):
                    runs_at.append(summary)

    simulate({a: ask.budgets[-1] for a in setups}, range(rounds[0]))
    search = searched_all(ask, len(setups))
    if len(rounds) > 1:
        search = f"raced {len(setups)} allocations{at_budgets(ask)}: {rounds[0]} replicates each"
        contenders = allocations
        for start, stop in pairwise(rounds):
            racing = {a: runs[a] for a in contenders}
            contenders = race(assess_all(racing, variant, ask), ask)
            if not contenders:
                search += ", then none could still meet the ask"
                break
            # Each setup runs to the largest of its budgets still in the race.
            todo: dict[Allocation, int] = {}
            for a in contenders:
                todo[a.setup] = max(todo.get(a.setup, 0), ask.budget_of(a))
            total += len(todo) * (stop - start)
            simulate(todo, range(start, stop))
            search += f", then the {len(todo)} that could still win to {stop}"
    advice = decide(ask, scenario, search, assess_all(runs, variant, ask))
    advice.notes = dropped + advice.notes
    return advice


def searched_all(ask: Ask, setups: int) -> str:
    """How a grid simulated in full was searched, in words."""
    if not ask.several_budgets:
        return f"all {setups} allocations with {ask.replicates} replicates each"
    return f"all {setups} allocations{at_budgets(ask)} with {ask.replicates} replicates each"


def at_budgets(ask: Ask) -> str:
    """The budgets of the search, and that each costs no simulation of its own."""
    if not ask.several_budgets:
        return ""
    return f" at {len(ask.budgets)} budgets (one run a replicate, read at each budget)"


def at_budget(ask: Ask, setup: Allocation, budget: int) -> Allocation:
    """The setup at this budget, as the ask's allocations name it."""
    return replace(setup, budget=budget) if ask.several_budgets else setup


def advise_work(scenario: Scenario, ask: Ask) -> Work:
    """What the ask's certain work costs (workload.py): every allocation's first round, to
    the largest budget. A race's later rounds depend on what the first finds."""
    variant = variants(scenario, ask, ask.budgets[-1])
    runs = [(variant[a], a.shape, ask.first_round) for a in ask.setups()]
    return estimate(runs, Cost.measured(scenario))


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


def work_units(
    variant: dict[Allocation, Scenario],
    ask: Ask,
    todo: dict[Allocation, int],
    replicates: range,
) -> tuple[list[tuple[Allocation, tuple[int, ...]]], list[tuple]]:
    """Units of `CHUNK` replicates for a backend, each setup run to its budget in `todo`,
    and the setup and budgets each unit answers."""
    owners, units = [], []
    for setup, largest in todo.items():
        budgets = tuple(b for b in ask.budgets if b <= largest)
        scenario = variant[at_budget(ask, setup, largest)]
        for i in range(replicates.start, replicates.stop, CHUNK):
            owners.append((setup, budgets))
            chunk = range(i, min(i + CHUNK, replicates.stop))
            units.append((scenario, setup.shape, chunk, budgets))
    return owners, units


def assess_all(
    runs: dict[Allocation, list[RunSummary]], variant: dict[Allocation, Scenario], ask: Ask
) -> list[Assessment]:
    assessments = [assess(a, variant[a], batch, ask) for a, batch in runs.items()]
    with_intervals(assessments)
    return assessments


def with_intervals(assessments: list[Assessment]) -> None:
    """Work out every assessment's wall-clock, dollars and test-score intervals at once, a
    numpy call per figure and number of replicates: the numbers Interval.of gives one by
    one (Interval.of_rows), which the race and the ranking read of every allocation."""
    by_count: dict[int, list[Assessment]] = {}
    for x in assessments:
        by_count.setdefault(x.replicates, []).append(x)
    for group in by_count.values():
        for name, values in (
            ("wall_clock", "wall_clocks"),
            ("dollars", "dollar_values"),
            ("test_score", "test_scores"),
        ):
            rows = [getattr(x, values) for x in group]
            if rows[0] is None:
                continue
            for x, interval in zip(group, Interval.of_rows(rows), strict=True):
                x.__dict__[name] = interval  # the cached_property's own slot


def standard_error(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def assess(
    allocation: Allocation, scenario: Scenario, runs: list[RunSummary], ask: Ask
) -> Assessment:
    return Assessment(allocation, scenario, tuple(runs), ask)


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
        broken = [
            what
            for what, holds in (
                ("the deadline", top.meets_deadline),
                ("the dollar cap", top.within_cap),
            )
            if holds is False
        ]
        gain, se = top.versus(best, "score")
        past = []
        if top.meets_deadline is False:
            past.append(f"takes {format_duration(top.wall_clock.high)}")
        if top.within_cap is False:
            past.append(f"costs ${top.dollars.high:,.2f}")
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
