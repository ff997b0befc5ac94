"""Which allocation to run: P parents, N proposals each, minibatch b, W workers.

`advise` simulates every allocation of a grid at a fixed metric-call budget
and ranks those that meet the deadline and the dollar cap by the objective:
time, cost, or score (the chosen candidate's expected test score, under a
scenario's quality model). Allocations whose scores cannot be told apart
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
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from pxn.acceptance import Acceptance
from pxn.durations import format_duration, format_span
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import analytic
from pxn.sim.backends import Backend, LocalBackend, gather
from pxn.sim.predict import CHUNK, Prediction, simulate_replicates, summarize_replicates
from pxn.sim.workload import Cost, Work, estimate
from pxn.trace import RunSummary

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


@dataclass(frozen=True, order=True)
class Allocation:
    p: int
    n: int
    b: int
    workers: int

    @property
    def shape(self) -> Shape:
        return Shape(self.p, self.n)

    @property
    def label(self) -> str:
        return f"{self.p}x{self.n} b={self.b} W={self.workers}"


@dataclass(frozen=True)
class Ask:
    """The question: a grid of allocations, the constraints, the objective."""

    budget: int
    p: tuple[int, ...]
    n: tuple[int, ...]
    b: tuple[int, ...]
    workers: tuple[int, ...]
    deadline: float | None = None  # seconds
    max_dollars: float | None = None
    objective: str = "time"
    replicates: int = 100
    race: bool = True  # False: every allocation gets every replicate, however large the grid

    @property
    def grid_size(self) -> int:
        return len(self.p) * len(self.n) * len(self.b) * len(self.workers)

    @property
    def rounds(self) -> tuple[int, ...]:
        """The replicates an allocation has after each round: all of them at once, or a
        race's rounds, the last to the full count."""
        if not (self.race and self.grid_size > FULL_GRID_MAX):
            return (self.replicates,)
        early = SCORE_RACE_ROUNDS if self.objective == "score" else (RACE_REPLICATES,)
        return (*(r for r in early if r < self.replicates), self.replicates)

    @property
    def first_round(self) -> int:
        """Replicates every allocation gets: all of them, or a race's first round."""
        return self.rounds[0]

    def allocations(self) -> list[Allocation]:
        return [
            Allocation(p, n, b, w)
            for w in self.workers
            for b in self.b
            for p in self.p
            for n in self.n
        ]


@dataclass(frozen=True)
class Assessment:
    """One allocation's prediction, judged against the ask."""

    allocation: Allocation
    prediction: Prediction
    wall_clock_se: float  # standard error of the mean wall-clock
    dollars_se: float | None
    meets_deadline: bool | None  # None: no deadline asked
    within_cap: bool | None  # None: no dollar cap asked
    limited_by: str  # what sets this allocation's pace, and which constraint is near
    # Per replicate, in replicate order, for paired comparisons.
    wall_clocks: tuple[float, ...] = ()
    dollar_values: tuple[float, ...] | None = None
    test_scores: tuple[float, ...] | None = None  # the quality model's

    @property
    def feasible(self) -> bool:
        return self.meets_deadline is not False and self.within_cap is not False

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
    if ask.objective == "score" and scenario.quality is None:
        raise PxnError(
            "the scenario has no [quality] model, so the score a search reaches cannot be "
            "predicted: calibrate from traces that record scores, or add a [quality] table"
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
    scenario.replace(budget=ask.budget)  # the budget's own checks (one seed validation)


# -- bounds that refuse an ask without simulating ------------------------------


def bound_reasons(scenario: Scenario, ask: Ask) -> list[str]:
    """Why no allocation can meet the ask, from lower bounds alone (empty: it may)."""
    reasons = []
    if ask.deadline is not None:
        best_w, best_bound = min(ask.workers), math.inf
        # The strong-scaling bound depends on W alone; the rate bound counts
        # reflections too, which differ by shape and b: the lowest is the bound.
        for a, variant in variants(scenario, ask).items():
            # Under the quality model, every proposal accepted: the fewest iterations, so
            # the fewest reflections, and still a lower bound.
            every = Acceptance(1.0) if variant.acceptance is None else None
            bounds = analytic(variant, a.shape, every)
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
                f"(B={ask.budget} metric calls)"
            )
    if ask.max_dollars is not None:
        floor = ask.budget * scenario.mean_call_dollars("task")
        if floor > ask.max_dollars:
            reasons.append(
                f"no allocation fits ${ask.max_dollars:,.2f}: the B={ask.budget} metric calls "
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
    allocations = ask.allocations()
    reasons = bound_reasons(scenario, ask)
    if reasons:
        return Advice(
            ask, scenario, "refused from bounds alone: nothing simulated", reasons=reasons
        )
    variant = variants(scenario, ask)
    runs: dict[Allocation, list[RunSummary]] = {a: [] for a in allocations}
    rounds = ask.rounds
    done, total = 0, len(allocations) * rounds[0]

    def simulate(todo: Sequence[Allocation], replicates: range) -> None:
        owners, units = work_units(variant, todo, replicates)

        def told(_: int, batch: list[RunSummary]) -> None:
            nonlocal done
            done += len(batch)
            if on_progress:
                on_progress(done, total)

        results = gather(backend or LocalBackend(), simulate_replicates, units, told)
        for a, batch in zip(owners, results, strict=True):
            runs[a].extend(batch)  # an allocation's chunks come in replicate order

    simulate(allocations, range(rounds[0]))
    search = f"all {len(allocations)} allocations with {ask.replicates} replicates each"
    if len(rounds) > 1:
        search = f"raced {len(allocations)} allocations: {rounds[0]} replicates each"
        contenders = allocations
        for start, stop in pairwise(rounds):
            racing = {a: runs[a] for a in contenders}
            contenders = race(assess_all(racing, variant, ask), ask)
            if not contenders:
                search += ", then none could still meet the ask"
                break
            total += len(contenders) * (stop - start)
            simulate(contenders, range(start, stop))
            search += f", then the {len(contenders)} that could still win to {stop}"
    return decide(ask, scenario, search, assess_all(runs, variant, ask))


def advise_work(scenario: Scenario, ask: Ask) -> Work:
    """What the ask's certain work costs (workload.py): every allocation's first round.
    A race's later rounds depend on what the first finds."""
    variant = variants(scenario, ask)
    runs = [(variant[a], a.shape, ask.first_round) for a in ask.allocations()]
    return estimate(runs, Cost.measured(scenario))


def variants(scenario: Scenario, ask: Ask) -> dict[Allocation, Scenario]:
    """The scenario each allocation runs: the ask's budget, the allocation's b and W."""
    return {
        a: scenario.replace(budget=ask.budget, minibatch=a.b, workers=a.workers)
        for a in ask.allocations()
    }


def work_units(
    variant: dict[Allocation, Scenario], todo: Sequence[Allocation], replicates: range
) -> tuple[list[Allocation], list[tuple]]:
    """Units of `CHUNK` replicates for a backend, and the allocation each belongs to."""
    owners, units = [], []
    for a in todo:
        for i in range(replicates.start, replicates.stop, CHUNK):
            owners.append(a)
            units.append((variant[a], a.shape, range(i, min(i + CHUNK, replicates.stop))))
    return owners, units


def assess_all(
    runs: dict[Allocation, list[RunSummary]], variant: dict[Allocation, Scenario], ask: Ask
) -> list[Assessment]:
    return [assess(a, variant[a], batch, ask) for a, batch in runs.items()]


def standard_error(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def assess(
    allocation: Allocation, scenario: Scenario, runs: list[RunSummary], ask: Ask
) -> Assessment:
    prediction = summarize_replicates(scenario, allocation.shape, runs, None)
    dollars = prediction.dollars
    meets_deadline = None if ask.deadline is None else prediction.wall_clock.high <= ask.deadline
    within_cap = (
        None if ask.max_dollars is None or dollars is None else dollars.high <= ask.max_dollars
    )
    return Assessment(
        allocation=allocation,
        prediction=prediction,
        wall_clock_se=standard_error([r.wall_clock for r in runs]),
        dollars_se=None if dollars is None else standard_error([r.dollars for r in runs]),
        meets_deadline=meets_deadline,
        within_cap=within_cap,
        limited_by=limited_by(prediction, ask, scenario.optimizer),
        wall_clocks=tuple(r.wall_clock for r in runs),
        dollar_values=None if dollars is None else tuple(r.dollars for r in runs),
        test_scores=None if prediction.test_score is None else tuple(r.test_score for r in runs),
    )


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
        p = x.prediction
        late = ask.deadline is not None and p.wall_clock.low > ask.deadline
        dear = (
            ask.max_dollars is not None
            and p.dollars is not None
            and p.dollars.low > ask.max_dollars
        )
        return not (late or dear)

    alive = [x for x in assessments if possible(x)]
    if not alive:
        return []
    leaders = [x for x in alive if x.feasible] or alive
    leader = min(leaders, key=lambda x: x.objective(ask.objective)[0])

    def could_win(x: Assessment) -> bool:  # not behind the leader by more than the margin
        behind, se = x.versus(leader, ask.objective)
        return behind <= RACE_MARGIN * se

    contenders = [x for x in alive if could_win(x)]
    if ask.objective == "score":  # of those tied on score the fastest wins (decide)
        contenders = [x for x in contenders if not outpaced(x, contenders)]
    return [x.allocation for x in contenders]


def outpaced(x: Assessment, others: list[Assessment]) -> bool:
    """Whether another allocation scores at least as well on average and is clearly faster:
    then `x` can be neither the best score nor the fastest of those tied with it."""
    for y in others:
        if y is x or y.prediction.test_score.mean < x.prediction.test_score.mean:
            continue
        slower, se = x.versus(y, "time")
        if slower > RACE_MARGIN * se:
            return True
    return False


def decide(ask: Ask, scenario: Scenario, search: str, assessments: list[Assessment]) -> Advice:
    """Rank, recommend, name the ties, or say why nothing is feasible."""
    complete = [x for x in assessments if x.prediction.replicates == ask.replicates]

    def key(x: Assessment) -> tuple[bool, float, float]:
        time = x.prediction.wall_clock.mean
        return (not x.feasible, x.objective(ask.objective)[0], time)

    ranked = sorted(assessments, key=lambda x: (x.prediction.replicates != ask.replicates, *key(x)))
    notes = dict.fromkeys(note for x in complete for note in x.prediction.notes)
    advice = Advice(ask, scenario, search, ranked, notes=list(notes))
    feasible = sorted((x for x in complete if x.feasible), key=key)
    if not feasible:
        advice.reasons = infeasibility_reasons(ask, complete or assessments)
        return advice
    best = feasible[0]
    ties = [x for x in feasible[1:] if tied(x, best, ask.objective)]
    if ask.objective == "score" and ties:  # scores that cannot be told apart: the fastest
        best, *ties = sorted([best, *ties], key=lambda x: x.prediction.wall_clock.mean)
        advice.notes.append(
            f"{len(ties) + 1} allocations reach an expected test score within noise of the "
            "best; the fastest of them is recommended"
        )
        # Listed as decided: the recommendation, its ties by time, then the rest as ranked.
        first = [best, *ties]
        advice.assessments = first + [x for x in ranked if all(x is not y for y in first)]
    advice.recommended, advice.runners_up = best, ties
    return advice


def tied(x: Assessment, best: Assessment, objective: str) -> bool:
    """Within noise of the best: the paired difference is within NOISE standard errors."""
    difference, se = x.versus(best, objective)
    return abs(difference) <= NOISE * se


def infeasibility_reasons(ask: Ask, assessments: list[Assessment]) -> list[str]:
    reasons = []
    # The closest to feasible: the lowest 95th percentile.
    closest = min(assessments, key=lambda x: x.prediction.wall_clock.high)
    if ask.deadline is not None and closest.meets_deadline is False:
        w = closest.prediction.wall_clock
        reasons.append(
            f"no allocation meets the {format_duration(ask.deadline)} deadline in 95% of "
            f"simulated runs: the closest, {closest.allocation.label}, takes "
            f"{format_duration(w.mean)} [{format_span(w.low, w.high)}]"
        )
    if ask.max_dollars is not None:
        closest = min(assessments, key=lambda x: x.prediction.dollars.high)
        d = closest.prediction.dollars
        if closest.within_cap is False:
            reasons.append(
                f"no allocation fits ${ask.max_dollars:,.2f} in 95% of simulated runs: the "
                f"closest, {closest.allocation.label}, costs ${d.mean:,.2f} "
                f"[{d.low:,.2f}-{d.high:,.2f}]"
            )
    if not reasons:  # each constraint alone can be met, not both at once
        on_time = [x for x in assessments if x.meets_deadline]
        cheapest = min(on_time, key=lambda x: x.prediction.dollars.mean)
        reasons.append(
            f"the allocations that meet the deadline all cost more than "
            f"${ask.max_dollars:,.2f}: the cheapest of them, {cheapest.allocation.label}, "
            f"costs ${cheapest.prediction.dollars.mean:,.2f} "
            f"(95th percentile ${cheapest.prediction.dollars.high:,.2f})"
        )
    return reasons
