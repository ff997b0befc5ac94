"""Real gepa runs on synthetic work: one run at a scenario's setup, and a grid of them
(every shape at every W, a few times each), with what their models slept."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pxn.checks.synthetic import (
    SearchOutcome,
    SleepingModel,
    SyntheticWork,
    check_realisable,
    levels_work,
)
from pxn.errors import PxnError
from pxn.runner.config import Plan, RunConfig, check_out
from pxn.runner.run import RunResult, run_engine, sigterm_as_interrupt
from pxn.scenario import Scenario
from pxn.shape import Shape

# make_work(scenario, reflection rng, run conditions z, the run's search seed)
MakeWork = Callable[[Scenario, np.random.Generator, float, np.random.SeedSequence], SyntheticWork]


@dataclass(frozen=True)
class SyntheticRun:
    """One run on synthetic work: the runner's result and what its models slept."""

    shape: Shape
    workers: int
    replicate: int
    result: RunResult
    rollout_calls: int
    rollout_drawn: float  # seconds the rollouts' calls were meant to sleep
    rollout_slept: float  # seconds they slept
    reflection_drawn: float
    reflection_slept: float
    search: SearchOutcome

    @property
    def trace(self) -> Path:
        return self.result.out / "trace.jsonl"

    @property
    def trace_check(self) -> str:
        """ "ok", or how the trace disagreed with gepa's own counts."""
        return "ok" if not self.result.warnings else "; ".join(self.result.warnings)


def run_synthetic(
    scenario: Scenario,
    shape: Shape,
    out: Path,
    replicate: int,
    make_work: MakeWork = levels_work,
) -> SyntheticRun:
    """One real gepa run at the scenario's setup (B, V, b, W, C, selection) on synthetic work.

    Replicate r runs gepa with seed r, and the models on a random stream of this shape,
    W and r alone: runs of other shapes or pools draw other latencies, verdicts and
    scores, so every run of a grid is an independent draw (the verdict's tests assume it).
    """
    check_realisable(scenario)
    key = (shape.p, shape.n, scenario.workers, replicate)
    # Latencies of each model, the run's conditions (one z for both models), the search.
    streams = np.random.SeedSequence(scenario.seed, spawn_key=key).spawn(4)
    z = np.random.default_rng(streams[2]).standard_normal() if scenario.loads.varies_by_run else 0
    task_lm = SleepingModel(scenario, np.random.default_rng(streams[0]), float(z))
    work = make_work(scenario, np.random.default_rng(streams[1]), float(z), streams[3])
    config = RunConfig(
        out=str(out),
        task=work.task.name,
        shape=str(shape),
        budget=scenario.budget,
        workers=scenario.workers,
        selection=str(scenario.selection),
        minibatch=scenario.minibatch,
        reflection_concurrency=scenario.reflection_concurrency,
        seed=replicate,
        progress=False,
        merge=scenario.merge,
        max_merges=scenario.max_merges,
    )
    check_out(config, resume=False)
    # The reflections never fail here: a run stopped for failed reflections would be a bug.
    plan = Plan(
        shape.p, shape.n, work.task, scenario.reflection_concurrency, 1, budget=scenario.budget
    )
    reflection_lm = work.reflection
    meta = {"synthetic": {"scenario": scenario.to_dict(), "replicate": replicate}}
    with sigterm_as_interrupt():
        result = run_engine(config, plan, task_lm, reflection_lm, meta=meta)
    if result.status != "completed":
        raise RuntimeError(f"a synthetic run {result.status}: {result.message}")
    return SyntheticRun(
        shape=shape,
        workers=scenario.workers,
        replicate=replicate,
        result=result,
        rollout_calls=task_lm.calls,
        rollout_drawn=task_lm.drawn,
        rollout_slept=task_lm.slept,
        reflection_drawn=reflection_lm.drawn,
        reflection_slept=reflection_lm.slept,
        search=work.outcome(result),
    )


@dataclass(frozen=True)
class RunGrid:
    """Which runs: every shape at every W, `runs` times each."""

    shapes: list[Shape]
    workers: list[int]
    runs: int

    def __post_init__(self) -> None:
        if not self.shapes:
            raise PxnError("needs at least one shape, e.g. single,2x2", subject="shapes")
        if not self.workers or min(self.workers) < 1:
            raise PxnError(f"are whole numbers >= 1: got {self.workers}", subject="workers")
        if self.runs < 1:
            raise PxnError(f"must be at least 1: got {self.runs}", subject="runs")

    @property
    def size(self) -> int:
        return len(self.shapes) * len(self.workers) * self.runs

    def cells(self) -> Iterator[tuple[int, Shape, int]]:
        """(replicate, shape, W), replicates outermost: a slow spell of a shared machine
        then falls on every shape and W alike instead of on one of them."""
        return itertools.product(range(self.runs), self.shapes, self.workers)


def run_grid(
    scenario: Scenario,
    grid: RunGrid,
    out: Path,
    on_run: Callable[[SyntheticRun], None] = lambda run: None,
    make_work: MakeWork = levels_work,
) -> list[SyntheticRun]:
    """Every run of the grid, each into out/SHAPE-wW-rR/; `on_run` is told as each ends."""
    runs = []
    for replicate, shape, workers in grid.cells():
        at_w = scenario.replace(workers=workers)
        where = out / f"{shape}-w{workers}-r{replicate}"
        run = run_synthetic(at_w, shape, where, replicate, make_work)
        on_run(run)
        runs.append(run)
    return runs


def oversleep(runs: list[SyntheticRun]) -> dict[str, float]:
    """How much longer than drawn the calls took, over the runs: the part of a rollout's
    or reflection's latency the machine added (its threads woken late)."""
    rollouts = sum(r.rollout_slept for r in runs) / sum(r.rollout_drawn for r in runs)
    reflections = sum(r.reflection_slept for r in runs) / sum(r.reflection_drawn for r in runs)
    return {"rollouts": rollouts - 1, "reflections": reflections - 1}
