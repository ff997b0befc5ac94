"""Many replicates of the simulator -> a prediction with an interval, per shape.

Replicate r always uses its own random stream (model.replicate_rng), so a
prediction is the same to the bit however its replicates are spread over
processes or machines (backends.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import AnalyticPrediction, analytic
from pxn.sim.backends import Backend, LocalBackend, gather
from pxn.sim.model import simulate_once
from pxn.trace import STAGES, RunSummary

CHUNK = 25  # replicates per unit of work handed to a process


@dataclass(frozen=True)
class Interval:
    """Mean and 5-95% interval over replicates."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        array = np.asarray(values, dtype=float)
        low, high = np.percentile(array, [5, 95])
        return cls(float(array.mean()), float(low), float(high))


@dataclass(frozen=True)
class Prediction:
    """What the simulator and the closed form predict for one shape on one scenario."""

    shape: Shape
    replicates: int
    wall_clock: Interval  # seconds
    iterations: Interval
    full_val_share: Interval
    metric_calls: Interval
    proposals: Interval
    accepted: Interval
    utilisation: Interval
    stage_time: dict[str, float]  # mean seconds per stage, plus "overhead"
    analytic: AnalyticPrediction
    speedup: float  # mean wall-clock of single / this shape's (simulated)
    dollars: Interval | None = None  # what a run costs; None when the scenario has no prices
    # Share of calls (metric calls + reflections) that waited for rate-limit capacity.
    throttled_share: Interval = Interval(0.0, 0.0, 0.0)
    rate_limited: bool = False  # the scenario has provider limits (throttled_share applies)


def simulate_replicates(scenario: Scenario, shape: Shape, replicates: range) -> list[RunSummary]:
    return [simulate_once(scenario, shape, r) for r in replicates]


def summarize_replicates(
    scenario: Scenario, shape: Shape, runs: list[RunSummary], single_wall_clock: float
) -> Prediction:
    wall = Interval.of([r.wall_clock for r in runs])
    dollars = [r.dollars for r in runs]
    return Prediction(
        shape=shape,
        replicates=len(runs),
        wall_clock=wall,
        iterations=Interval.of([r.iterations for r in runs]),
        full_val_share=Interval.of([r.full_val_share for r in runs]),
        metric_calls=Interval.of([r.metric_calls for r in runs]),
        proposals=Interval.of([r.proposals for r in runs]),
        accepted=Interval.of([r.accepted for r in runs]),
        utilisation=Interval.of([r.utilisation for r in runs]),
        stage_time={
            name: float(np.mean([r.stage_time[name] for r in runs]))
            for name in (*STAGES, "overhead")
        },
        analytic=analytic(scenario, shape),
        speedup=single_wall_clock / wall.mean,
        dollars=None if None in dollars else Interval.of(dollars),
        throttled_share=Interval.of(
            [r.throttled_calls / (r.metric_calls + r.proposals) for r in runs]
        ),
        rate_limited=scenario.rate_limits.limited,
    )


def check_sweep(shapes: Sequence[Shape], replicates: int, jobs: int) -> None:
    """Refuse a sweep that cannot give an answer, before any work starts."""
    if replicates < 2:
        raise PxnError(f"must be >= 2 to give an interval: got {replicates}", subject="replicates")
    if jobs < 1:
        raise PxnError(f"must be >= 1: got {jobs}", subject="jobs")
    if not shapes:
        raise PxnError("name at least one shape, like single,2x2", subject="shapes")


def sweep(
    scenario: Scenario,
    shapes: Sequence[Shape],
    replicates: int,
    jobs: int = 1,
    on_progress: Callable[[int], None] | None = None,
    backend: Backend | None = None,
) -> list[Prediction]:
    """Predict every shape; `on_progress(n)` is told as each n replicates finish.

    Single (1x1) is simulated too when it is not asked for: every speedup is
    measured against it. The work runs on `backend` (opened and closed by the
    caller), else on `jobs` local processes; the answer is the same to the bit.
    """
    check_sweep(shapes, replicates, jobs)
    single = Shape(1, 1)
    todo = list(dict.fromkeys([*shapes, single]))
    units = [
        (scenario, shape, range(i, min(i + CHUNK, replicates)))
        for shape in todo
        for i in range(0, replicates, CHUNK)
    ]

    def told(_: int, runs: list[RunSummary]) -> None:
        if on_progress:
            on_progress(len(runs))

    if backend is None:
        with LocalBackend(jobs) as local:
            results = gather(local, simulate_replicates, units, told)
    else:
        results = gather(backend, simulate_replicates, units, told)
    by_shape: dict[Shape, list[RunSummary]] = {shape: [] for shape in todo}
    for (_, shape, _), runs in zip(units, results, strict=True):
        by_shape[shape].extend(runs)  # units of a shape are in replicate order

    single_mean = float(np.mean([r.wall_clock for r in by_shape[single]]))
    return [summarize_replicates(scenario, s, by_shape[s], single_mean) for s in shapes]


def total_replicates(shapes: Sequence[Shape], replicates: int) -> int:
    """How many replicates `sweep` will run (single is added when absent)."""
    return replicates * len(set(shapes) | {Shape(1, 1)})
