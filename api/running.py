"""How the API runs simulations: the scenario asked for, the work refused when it could never
finish here, and the sweep with its progress on stderr.

A scenario is given as a Scenario, a preset's name or a TOML path; the
overrides (seed, workers, minibatch, budget) replace its own values when given, a
budget in metric calls or as dspy.GEPA takes it (pxn.budget: auto:LEVEL and
full-evals:N, worked out for the program's predictors and the scenario's V
and trainset size). Work
is judged before it starts (sim.workload): more than this machine's memory,
or days of CPU on the processes asked for, is refused with what to ask for
less of.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.api.console import WorkProgress
from pxn.budget import metric_calls_of
from pxn.errors import PxnError
from pxn.shape import Shape, parse_shapes

if TYPE_CHECKING:  # imported when the work runs: `pxn --help` needs none of numpy and scipy
    from pxn.scenario import Scenario
    from pxn.sim.backends import Backend
    from pxn.sim.predict import Prediction
    from pxn.sim.workload import Work

    ScenarioLike = Scenario | str | Path
    ShapesLike = str | Iterable[Shape | str]
    Spread = tuple[int, str, str | None, bool]  # jobs, backend, address, progress

DEFAULT_JOBS = min(2, os.cpu_count() or 1)  # local processes, unless asked for more
SMALLER_SWEEP = "ask for fewer replicates or a smaller budget, or fewer or smaller shapes"


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
        budget = budget_of(loaded, budget, predictors)
    elif predictors is not None and loaded.budget_given is not None:
        loaded = loaded.replace(predictors=predictors)
    changes = {
        key: value
        for key, value in {
            "seed": seed,
            "workers": workers,
            "budget": budget,
            "minibatch": minibatch,
        }.items()
        if value is not None
    }
    return loaded.replace(**changes) if changes else loaded


def budget_of(scenario: Scenario, budget: int | str, predictors: int | None) -> int:
    """B in metric calls for the scenario's V and trainset size (and its predictors, unless
    given)."""
    return metric_calls_of(
        budget,
        predictors=scenario.program_predictors if predictors is None else predictors,
        valset_size=scenario.valset_size,
        trainset_size=scenario.trainset_size,
    )


def shapes_of(shapes: ShapesLike) -> list[Shape]:
    """Shapes from text ("single,2x2") or a list of Shapes and texts, each once."""
    if isinstance(shapes, str):
        return parse_shapes(shapes)
    return parse_shapes(",".join(s.label if isinstance(s, Shape) else str(s) for s in shapes))


def processes_of(backend: str, address: str | None, jobs: int) -> int | None:
    """The processes the work will be spread over; None: a Ray cluster's, unknown here."""
    return None if backend == "ray" and address is not None else jobs


def checked_work(
    work: Work, what: str, backend: str, address: str | None, jobs: int, smaller: str
) -> str:
    """Refuse work that could never finish here; else what it should take, in words."""
    from pxn.sim.workload import check_work, roughly

    processes = processes_of(backend, address, jobs)
    check_work(work, processes, what, smaller)
    if processes is None:  # a cluster's size is unknown: its time is not judged here
        return f"{roughly(work.seconds)} of CPU"
    return f"{roughly(work.wall_seconds(processes))} on {processes} process(es) if idle"


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
    judged first (`checked_work`), and Ctrl-C's note says how far it got."""
    from pxn.sim.backends import make_backend

    jobs, backend, address, progress = spread
    meter = WorkProgress(description, "replicates", total, shown=progress)
    with meter.told_when_stopped():
        meter.estimate = checked_work(work(), what, backend, address, jobs, smaller) + race
        # Opened (Ray connected) before the bar too: a bad address is one line.
        with make_backend(backend, address, jobs) as the_backend, meter:
            yield meter, the_backend


def run_sweep(
    scenario: Scenario, shapes: list[Shape], reps: int, spread: Spread
) -> list[Prediction]:
    """Every shape's prediction, the replicates counted on stderr when asked."""
    from pxn.sim.predict import check_sweep, sweep, sweep_work, total_replicates

    check_sweep(shapes, reps, spread[0])  # before the progress bar draws anything
    total = total_replicates(scenario, shapes, reps)
    work = partial(sweep_work, scenario, shapes, reps)
    with metered(total, work, "this sweep", SMALLER_SWEEP, spread) as (meter, backend):
        return sweep(
            scenario, shapes, reps, jobs=spread[0], on_progress=meter.advance, backend=backend
        )
