"""Which allocation to run: P parents, N proposals each, minibatch b, W workers.

`advise` simulates every allocation of a grid at a metric-call budget, or
at several, and ranks those that meet the deadline and the dollar cap by the
objective: time, cost, or score (the chosen candidate's expected test score,
under a quality model); asked for a target score, by time or cost those
reaching it with a chance of at least TARGET_CHANCE. Of the allocations
whose scores are within noise of the best the fastest is recommended.
Without a quality model, iterations (how often the search adapts) and
proposals are reported beside each allocation for the user to weigh.

A large grid is raced: every allocation gets a few replicates, those that
cannot win (advise_ranking.race) are dropped, and the rest get the full
count.
Replicate r of an allocation always draws from its own stream, so a raced
allocation's figures are those a full simulation would give.

Several budgets cost one simulation per setup (P, N, b and W): a replicate
runs to the largest budget still in question and each smaller budget's run
is its prefix (model.simulate_budgets). Budgets are compared by score (the
fastest or cheapest run is always the smallest budget).

Replicate r of every allocation runs the same seed stream and parameter
draw (r mod D), so allocations are compared pair by pair: the standard
error of their replicate-r differences leaves out what they share (a slow
or fast draw of the parameters). Feasibility is judged on the 95th
percentile over all replicates, the parameters' uncertainty included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise

from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.sim.advise import (
    Advice,
    Allocation,
    Ask,
    Assessment,
    all_variants,
    at_budget,
    check_ask,
    unreachable_budgets,
    variants,
)
from pxn.sim.advise_ranking import decide, race
from pxn.sim.backends import Backend, LocalBackend, gather
from pxn.sim.predict import CHUNK, Interval, simulate_replicates_at
from pxn.sim.workload import Cost, Work, estimate


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
    search = f"all {len(setups)} allocations{at_budgets(ask)} with {ask.replicates} replicates each"
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


def at_budgets(ask: Ask) -> str:
    """The budgets of the search, and that each costs no simulation of its own."""
    if not ask.several_budgets:
        return ""
    return f" at {len(ask.budgets)} budgets (one run a replicate, read at each budget)"


def advise_work(scenario: Scenario, ask: Ask) -> Work:
    """What the ask's certain work costs (workload.py): every allocation's first round, to
    the largest budget. A race's later rounds depend on what the first finds."""
    variant = variants(scenario, ask, ask.budgets[-1])
    runs = [(variant[a], a.shape, ask.first_round) for a in ask.setups()]
    return estimate(runs, Cost.measured(scenario))


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
    """Each allocation's runs assessed, with every wall-clock, dollars and test-score
    interval worked out at once, a numpy call per figure and number of replicates: the
    numbers Interval.of gives one by one (Interval.of_rows), which the race and the
    ranking read of every allocation."""
    assessments = [Assessment(a, variant[a], tuple(batch), ask) for a, batch in runs.items()]
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
    return assessments
