"""What the API's commands share: the scenario with the overrides given, the budgets asked
about, the work judged before it starts (sim.workload: refused when it could never
finish here), and the replicates counted on stderr.

Several budgets are each named as given; a DSPy scenario asked about several gets
DSPy's auto levels within them as points of their own ("auto:light"), so a user sees
where DSPy's defaults stand; those outside are named in a note, not simulated (a level
far past the budgets asked would lengthen every replicate). A budget too small to
search is warned of before anything is simulated.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.api.console import WorkProgress, say, stderr
from pxn.budget import (
    dspy_auto_levels,
    metric_calls_of,
    resolve_budgets,
    too_few_proposals,
)
from pxn.errors import PxnError
from pxn.shape import Shape, parse_shapes

if TYPE_CHECKING:  # imported when the work runs: `pxn --help` needs none of numpy and scipy
    from pxn.scenario import Scenario
    from pxn.sim.backends import Backend
    from pxn.sim.workload import Work

    ScenarioLike = Scenario | str | Path
    ShapesLike = str | Iterable[Shape | str]
    Spread = tuple[int, str, str | None, bool]  # jobs, backend, address, progress

DEFAULT_JOBS = min(2, os.cpu_count() or 1)  # local processes, unless asked for more


def scenario_of(
    scenario: ScenarioLike,
    seed: int | None = None,
    workers: int | None = None,
    budget: int | str | None = None,
    predictors: int | None = None,
    minibatch: int | None = None,
) -> Scenario:
    """The scenario, with the seed, worker pool W, minibatch b and budget B given in place
    of its own (B as metric calls, auto:LEVEL or full-evals:N for a program of `predictors`,
    by default the scenario's). A scenario whose own budget is DSPy's follows `predictors`."""
    from pxn.scenario import Scenario
    from pxn.sim.presets import load_scenario

    if seed is not None and seed < 0:  # a negative seed would fail in numpy, after the work
        raise PxnError(f"must be a whole number >= 0: got {seed}", subject="seed")
    loaded = scenario if isinstance(scenario, Scenario) else load_scenario(str(scenario))
    if budget is not None:
        budget = metric_calls_of(
            budget,
            predictors=loaded.program_predictors if predictors is None else predictors,
            valset_size=loaded.valset_size,
            trainset_size=loaded.trainset_size,
        )
    elif predictors is not None and loaded.budget_given is not None:
        loaded = loaded.replace(predictors=predictors)
    given = {"seed": seed, "workers": workers, "budget": budget, "minibatch": minibatch}
    changes = {key: value for key, value in given.items() if value is not None}
    return loaded.replace(**changes) if changes else loaded


def shapes_of(shapes: ShapesLike) -> list[Shape]:
    """Shapes from text ("single,2x2") or a list of Shapes and texts, each once."""
    if isinstance(shapes, str):
        return parse_shapes(shapes)
    return parse_shapes(",".join(s.label if isinstance(s, Shape) else str(s) for s in shapes))


@contextmanager
def metered(
    total: int,
    work: Callable[[], Work],
    what: str,
    smaller: str,
    spread: Spread,
    description: str = "simulating",
    race: str = "",
) -> Iterator[tuple[WorkProgress, Backend]]:
    """The progress of `total` replicates and the backend to run them on; within, the work is
    judged first (refused when it could never finish here, else its time estimated), and
    Ctrl-C's note says how far it got."""
    from pxn.sim.backends import make_backend
    from pxn.sim.workload import check_work, roughly

    jobs, backend, address, progress = spread
    meter = WorkProgress(description, "replicates", total, shown=progress)
    with meter.told_when_stopped():
        # None: a Ray cluster's processes, unknown here, and so its time is not judged.
        processes = None if backend == "ray" and address is not None else jobs
        judged = work()
        check_work(judged, processes, what, smaller)
        if processes is None:
            meter.estimate = f"{roughly(judged.seconds)} of CPU{race}"
        else:
            seconds = roughly(judged.wall_seconds(processes))
            meter.estimate = f"{seconds} on {processes} process(es) if idle{race}"
        # Opened (Ray connected) before the bar too: a bad address is one line.
        with make_backend(backend, address, jobs) as the_backend, meter:
            yield meter, the_backend


@dataclass(frozen=True)
class Budgets:
    """The budgets asked about, smallest first, with how each was given."""

    names: dict[int, str]  # B -> as given ("2000", "auto:light")
    notes: tuple[str, ...] = field(default=())  # DSPy's levels left out, and why

    @property
    def values(self) -> tuple[int, ...]:
        return tuple(self.names)


def budgets_of(
    scenario: Scenario, given: int | str | Sequence[int | str] | None, predictors: int | None
) -> Budgets:
    """The budgets `given` (None: the scenario's own), for the scenario's V, trainset and
    the program's predictors (by default the scenario's), DSPy's levels among them."""
    predictors = scenario.program_predictors if predictors is None else predictors
    if given is None:
        return Budgets({scenario.budget: scenario.budget_given or str(scenario.budget)})
    names = resolve_budgets(
        given,
        predictors=predictors,
        valset_size=scenario.valset_size,
        trainset_size=scenario.trainset_size,
    )
    if len(names) == 1 or not scenario.from_dspy:
        return Budgets(names)
    low, high = min(names), max(names)
    levels = dspy_auto_levels(predictors, scenario.valset_size)
    outside = {label: calls for label, calls in levels.items() if not low <= calls <= high}
    for label, calls in levels.items():
        if label not in outside:
            names[calls] = label
    notes = ()
    if outside:
        listed = ", ".join(f"{label} (B={calls})" for label, calls in outside.items())
        notes = (
            f"DSPy's {listed} for a program of {predictors} predictor(s) and V="
            f"{scenario.valset_size} fall outside the budgets asked ({low}-{high}): widen "
            "them to see where they stand",
        )
    return Budgets(dict(sorted(names.items())), notes)


def proposal_warnings(
    scenario: Scenario,
    budgets: Sequence[int],
    shapes: Sequence[Shape],
    min_proposals: int,
    told: bool,
    minibatch: int | None = None,
) -> tuple[str, ...]:
    """The budgets that afford fewer than `min_proposals` proposals, the narrowest shape's
    (the fewest) at b (by default the scenario's): the largest such budget in full, the
    smaller ones counted. Said on stderr when `told`."""
    if min_proposals < 1:
        raise PxnError(f"must be a whole number >= 1: got {min_proposals}", subject="min proposals")
    k = min(shape.k for shape in shapes)
    b = scenario.minibatch if minibatch is None else minibatch
    flagged = [
        (budget, reason)
        for budget in sorted(budgets)
        if (reason := too_few_proposals(budget, scenario.valset_size, b, k, min_proposals))
    ]
    if not flagged:
        return ()
    reason = flagged[-1][1]
    more = len(flagged) - 1
    warning = reason + (f" (and {more} smaller budget(s) asked afford fewer)" if more else "")
    if told:
        say(f"pxn: warning: {warning}", stderr)
    return (warning,)
