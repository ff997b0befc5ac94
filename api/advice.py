"""Which allocation to run: `advise` ranks P, N, b and W for a budget under a deadline, a
dollar cap and rate limits (pxn.sim.advise_search: the grid, the race, the ranking)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from pxn.api.report import Report, Result
from pxn.api.running import DEFAULT_JOBS, budgets_of, metered, proposal_warnings, scenario_of
from pxn.budget import FEW_PROPOSALS
from pxn.errors import PxnError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from pxn.api.running import ScenarioLike
    from pxn.sim.advise import Advice, Assessment

    Values = str | int | Iterable[int]

SMALLER_ASK = "ask for fewer replicates or a smaller budget, or narrow the P, N, b or W ranges"


@dataclass(frozen=True)
class AdviseResult(Result):
    """The allocations ranked: the recommended one, those within noise of it, the rest."""

    advice: Advice

    @property
    def recommended(self) -> Assessment | None:
        """The best allocation that meets the ask; None when none does (see `reasons`)."""
        return self.advice.recommended

    @property
    def runners_up(self) -> list[Assessment]:
        """The allocations within noise of the recommended one."""
        return self.advice.runners_up

    @property
    def reasons(self) -> list[str]:
        """Why no allocation meets the ask (empty when one does)."""
        return self.advice.reasons

    def report(self) -> Report:
        from pxn.api.advice_report import advice_report

        return advice_report(self.advice)

    def figure(self) -> Figure:
        """Time against dollars (or iterations, without prices) of every allocation."""
        from pxn.api.advice_plot import advice_figure

        if not self.advice.assessments:
            raise PxnError(
                "nothing was simulated, so there is nothing to draw: " + "; ".join(self.reasons)
            )
        return advice_figure(self.advice)


def values_of(values: Values, what: str) -> tuple[int, ...]:
    """Values to try: text ("1..8", "64,128,512"), one number, or numbers."""
    from pxn.sim.advise import parse_values

    if isinstance(values, int):
        values = [values]
    return parse_values(values if isinstance(values, str) else ",".join(map(str, values)), what)


def advise(
    scenario: ScenarioLike,
    *,
    budget: int | str | Sequence[int | str] | None = None,
    predictors: int | None = None,
    deadline: str | float | None = None,
    max_dollars: float | None = None,
    target_score: float | None = None,
    workers: Values | None = None,
    p: Values = "1..4",
    n: Values = "1..4",
    minibatch: Values | None = None,
    objective: str = "time",
    reps: int = 100,
    full_grid: bool = False,
    min_proposals: int = FEW_PROPOSALS,
    seed: int | None = None,
    jobs: int = DEFAULT_JOBS,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> AdviseResult:
    """Recommend P, N, b and W, and B among several budgets, under a deadline and a dollar
    cap. P, N, b (`minibatch`) and W (`workers`) take the values to try as text ("1..8",
    "1,2,4"), a number or numbers; several budgets, as text or a list. The other keywords
    are `pxn advise`'s flags (its --help says each)."""
    from pxn.durations import parse_duration
    from pxn.shape import Shape
    from pxn.sim.advise import Ask, bound_reasons, check_ask
    from pxn.sim.advise_search import advise as advise_ask
    from pxn.sim.advise_search import advise_work

    the_scenario = scenario_of(scenario, seed, predictors=predictors)
    budgets = budgets_of(the_scenario, budget, predictors)
    values = budgets.values
    ask = Ask(
        budget=values[0] if len(values) == 1 else values,
        p=values_of(p, "p"),
        n=values_of(n, "n"),
        b=(the_scenario.minibatch,) if minibatch is None else values_of(minibatch, "b"),
        workers=(the_scenario.workers,) if workers is None else values_of(workers, "workers"),
        deadline=parse_duration(deadline, "deadline") if isinstance(deadline, str) else deadline,
        max_dollars=max_dollars,
        objective=objective,
        replicates=reps,
        race=not full_grid,
        target_score=target_score,
        budget_names=budgets.names,
    )
    check_ask(the_scenario, ask)  # before the progress bar draws anything
    narrowest = Shape(min(ask.p), min(ask.n))
    warnings = proposal_warnings(
        the_scenario, ask.budgets, [narrowest], min_proposals, progress, minibatch=max(ask.b)
    )
    if bound_reasons(the_scenario, ask):  # refused before anything is simulated
        advice = advise_ask(the_scenario, ask)
    else:
        with metered(
            ask.grid_size * ask.first_round,
            partial(advise_work, the_scenario, ask),
            "this search",
            SMALLER_ASK,
            (jobs, backend, address, progress),
            "simulating allocations",
            " for the race's first round" if ask.first_round < ask.replicates else "",
        ) as (meter, the_backend):
            advice = advise_ask(the_scenario, ask, the_backend, on_progress=meter.update)
    advice.notes = [*warnings, *budgets.notes, *advice.notes]  # the budgets' first
    return AdviseResult(advice)
