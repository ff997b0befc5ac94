"""The SimPy model of one batched gepa 0.1.4 run on a finite worker pool.

`gepa_run` is the process: it reads like `GEPAEngine.run` with `PxNSampling`.
Each stage is one barrier-to-barrier step; its rollouts are list-scheduled
onto the W worker slots in one go (see schedule.py), so a replicate costs a
few SimPy events per stage instead of one process per rollout. A local LM
pool (Scenario.lm_servers) narrows the slots; its load_slowdown stretches the
calls of a busy stage (see SimulatedRun.slowed).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np
import simpy

from pxn.scenario import Distribution, Scenario, Shape
from pxn.sim.schedule import list_schedule, makespan
from pxn.trace import (
    STAGES,
    Decision,
    Iteration,
    Reflection,
    Rollout,
    RunEnd,
    RunStart,
    RunSummary,
    Stage,
    TraceWriter,
)


class LatencyDraws:
    """Latencies drawn from a distribution in blocks: one scipy call serves many stages.

    Kept as a Python list: stages take a few draws at a time, and list slices
    are cheaper than numpy views at that size.
    """

    BLOCK = 4096

    def __init__(self, latency: Distribution, rng: np.random.Generator):
        self.latency = latency
        self.rng = rng
        self.block: list[float] = []
        self.used = 0

    def take(self, n: int) -> list[float]:
        if self.used + n > len(self.block):
            self.block = self.latency.sample(self.rng, max(n, self.BLOCK)).tolist()
            self.used = 0
        draws = self.block[self.used : self.used + n]
        self.used += n
        return draws


def total(seconds: list[float]) -> float:
    """The sum numpy gives for these values, to the bit.

    numpy sums 8 or more values pairwise, fewer in one running sum as Python
    does; matching it keeps results identical to those first computed with
    numpy arrays (the committed predictions reproduce from their seeds).
    """
    return sum(seconds) if len(seconds) < 8 else float(np.add.reduce(seconds))


def replicate_rng(seed: int, replicate: int) -> np.random.Generator:
    """Replicate r's own stream: the same whatever process or machine runs it."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(replicate,)))


@dataclass
class Task:
    """One (parent, minibatch) pair gepa proposes from; its child is `proposal`."""

    parent: str
    minibatch: list[str]
    proposal: str


@dataclass
class SimulatedRun:
    """The state of one simulated run, and the stage primitives gepa_run is made of."""

    env: simpy.Environment
    scenario: Scenario
    shape: Shape
    rng: np.random.Generator
    trace: TraceWriter | None = None
    metric_calls: int = 0
    iterations: int = 0
    full_val_iterations: int = 0
    proposals: int = 0
    accepted: int = 0
    candidates: int = 1  # the seed
    busy: float = 0.0  # worker-seconds spent in rollouts
    stage_time: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    def __post_init__(self) -> None:
        self.rollouts = LatencyDraws(self.scenario.rollout, self.rng)
        self.reflections = LatencyDraws(self.scenario.reflection, self.rng)
        # Calls a stage serves at once: its own cap, or fewer when the LM pool is smaller.
        servers = self.scenario.lm_servers
        self.rollout_slots = min(self.scenario.workers, servers or self.scenario.workers)
        cap = self.scenario.reflection_concurrency
        self.reflection_slots = min(cap, servers or cap)
        # The trainset's example ids twice over, so a minibatch that wraps around
        # the end of an epoch is one slice.
        names = [f"train:{i}" for i in range(self.scenario.trainset_size)]
        self.train_twice = names + names

    # -- the stages ---------------------------------------------------------

    def slowed(self, durations: list[float], slots: int) -> list[float]:
        """The latencies of a stage's calls, slowed by the load they start under.

        A call that starts while m calls are served (itself included) takes
        1 + beta (m - 1) times its draw. In a list-scheduled stage of n calls on
        s slots every call starts with min(n, s) in flight: all start together
        when n <= s, and each later one takes a slot the moment it frees while
        the others are still busy. The approximation: the factor is fixed at the
        start, so the last calls of a draining stage keep it while fewer run.
        """
        factor = 1 + self.scenario.load_slowdown * (min(len(durations), slots) - 1)
        return [d * factor for d in durations]

    def evaluate(
        self, iteration: int, phase: str, items: list[tuple[str, list[str]]]
    ) -> Generator[simpy.Event, None, None]:
        """One batch_evaluate call: every (candidate, examples) item, W (and lm_servers) at once."""
        n = sum(len(examples) for _, examples in items)
        slots = self.rollout_slots
        durations = self.rollouts.take(n)
        if self.scenario.load_slowdown:  # no extra work at the default
            durations = self.slowed(durations, slots)
        stage_start = self.env.now + self.scenario.stage_overhead
        length = makespan(durations, slots)
        yield self.env.timeout(self.scenario.stage_overhead + length)
        self.metric_calls += n
        self.busy += total(durations)
        self.stage_time[phase] += length
        if self.trace:
            # The slot a rollout runs on is a worker slot: with fewer LM servers
            # than workers, only the first `slots` workers' calls are ever served.
            starts, workers = list_schedule(durations, slots)
            calls = [(cand, ex) for cand, examples in items for ex in examples]
            for (candidate, example), start, duration, worker in zip(
                calls, starts, durations, workers, strict=True
            ):
                begin = stage_start + start
                self.trace.write(
                    Rollout(
                        start=begin,
                        end=begin + duration,
                        iteration=iteration,
                        phase=phase,
                        worker=worker,
                        candidate=candidate,
                        example=example,
                    )
                )
            self._write_stage(iteration, phase, stage_start)

    def reflect(self, iteration: int, tasks: list[Task]) -> Generator[simpy.Event, None, None]:
        """One reflection call per task, at most C (and lm_servers) at once."""
        slots = self.reflection_slots
        durations = self.reflections.take(len(tasks))
        if self.scenario.load_slowdown:  # no extra work at the default
            durations = self.slowed(durations, slots)
        stage_start = self.env.now + self.scenario.stage_overhead
        length = makespan(durations, slots)
        yield self.env.timeout(self.scenario.stage_overhead + length)
        self.stage_time["reflection"] += length
        if self.trace:
            starts, slot_of = list_schedule(durations, slots)
            for task, start, duration, slot in zip(tasks, starts, durations, slot_of, strict=True):
                begin = stage_start + start
                self.trace.write(
                    Reflection(
                        start=begin,
                        end=begin + duration,
                        iteration=iteration,
                        slot=slot,
                        proposal=task.proposal,
                        parent=task.parent,
                    )
                )
            self._write_stage(iteration, "reflection", stage_start)

    def _write_stage(self, iteration: int, name: str, start: float) -> None:
        assert self.trace is not None
        self.trace.write(Stage(start=start, end=self.env.now, iteration=iteration, name=name))

    # -- the choices gepa makes ---------------------------------------------

    def sample_tasks(self, iteration: int) -> list[Task]:
        """P parents from the pool, N minibatches each, as PxNSampling does."""
        b, train, n = self.scenario.minibatch, self.scenario.trainset_size, self.shape.n
        if self.shape.p == 1:  # numpy's scalar draw: the same number, a third of the cost
            parents = [int(self.rng.integers(0, self.candidates))]
        else:
            parents = self.rng.integers(0, self.candidates, size=self.shape.p).tolist()
        tasks = []
        for j in range(self.shape.k):
            first = (iteration + j) * b % train  # the epoch sampler advances one chunk per task
            minibatch = self.train_twice[first : first + b]
            tasks.append(Task(str(parents[j // n]), minibatch, f"{iteration}-{j}"))
        return tasks

    def skip_perfect_parents(self, tasks: list[Task]) -> list[Task]:
        """gepa skips a task whose parent scored perfectly on its whole minibatch."""
        if self.scenario.skip_perfect == 0:
            return tasks
        draws = self.rng.random(len(tasks)).tolist()
        return [
            task for task, u in zip(tasks, draws, strict=True) if u >= self.scenario.skip_perfect
        ]

    def judge(self, iteration: int, tasks: list[Task]) -> list[Task]:
        """Which children beat their parent on the minibatch, then gepa's selection."""
        acceptance, draws = self.scenario.acceptance, self.rng.random(len(tasks)).tolist()
        if acceptance.tau is None:
            chances = [acceptance.a0] * len(tasks)
        else:  # decaying with the proposals made before each one
            chances = acceptance.probability(self.proposals + np.arange(len(tasks))).tolist()
        self.proposals += len(tasks)
        passing = [task for task, u, a in zip(tasks, draws, chances, strict=True) if u < a]
        limit = self.scenario.selection_limit
        selected = passing if limit is None else passing[:limit]
        if self.trace:
            now = self.env.now
            # Selected children are numbered candidates, candidates + 1, ... in
            # order, the ids gepa_run validates them under.
            new_id = {task.proposal: str(self.candidates + i) for i, task in enumerate(selected)}
            for task in tasks:
                self.trace.write(
                    Decision(
                        start=now,
                        end=now,
                        iteration=iteration,
                        proposal=task.proposal,
                        parent=task.parent,
                        accepted=task.proposal in new_id,
                        candidate=new_id.get(task.proposal),
                    )
                )
        return selected


def gepa_run(run: SimulatedRun) -> Generator[simpy.Event, None, None]:
    """One gepa.optimize(..., sampling_strategy=PxNSampling(P, N)) run."""
    scenario, valset = run.scenario, [f"val:{i}" for i in range(run.scenario.valset_size)]
    yield from run.evaluate(0, "seed_val", [("0", valset)])
    # gepa checks the budget only here, so the last iteration overshoots it.
    while run.metric_calls < scenario.budget:
        run.iterations += 1
        iteration, started = run.iterations, run.env.now
        tasks = run.sample_tasks(iteration)
        yield from run.evaluate(
            iteration, "parent_minibatch", [(t.parent, t.minibatch) for t in tasks]
        )
        tasks = run.skip_perfect_parents(tasks)
        if tasks:
            yield from run.reflect(iteration, tasks)
            yield from run.evaluate(
                iteration, "child_minibatch", [(t.proposal, t.minibatch) for t in tasks]
            )
            selected = run.judge(iteration, tasks)
            if selected:
                new = [str(run.candidates + i) for i in range(len(selected))]
                yield from run.evaluate(iteration, "full_val", [(c, valset) for c in new])
                run.candidates += len(selected)
                run.accepted += len(selected)
                run.full_val_iterations += 1
        if run.trace:
            run.trace.write(Iteration(start=started, end=run.env.now, iteration=iteration))


def simulate_once(
    scenario: Scenario, shape: Shape, replicate: int, trace: TraceWriter | None = None
) -> RunSummary:
    """Simulate one replicate; write its trace too when a writer is given."""
    env = simpy.Environment()
    run = SimulatedRun(env, scenario, shape, replicate_rng(scenario.seed, replicate), trace)
    if trace:
        trace.write(
            RunStart(
                start=0.0,
                end=0.0,
                source="sim",
                shape=str(shape),
                budget=scenario.budget,
                workers=scenario.workers,
                reflection_concurrency=scenario.reflection_concurrency,
                valset_size=scenario.valset_size,
                trainset_size=scenario.trainset_size,
                minibatch=scenario.minibatch,
                seed=scenario.seed,
                # lm_servers under the key the runner writes for its local pool.
                meta={"scenario": scenario.to_dict(), "replicate": replicate}
                | ({} if scenario.lm_servers is None else {"lm_servers": scenario.lm_servers}),
            )
        )
    env.process(gepa_run(run))
    env.run()
    wall_clock = env.now
    if trace:
        trace.write(
            RunEnd(
                start=wall_clock,
                end=wall_clock,
                status="completed",
                metric_calls=run.metric_calls,
                iterations=run.iterations,
            )
        )
    stage_time = dict(run.stage_time)
    stage_time["overhead"] = wall_clock - sum(stage_time.values())
    return RunSummary(
        wall_clock=wall_clock,
        iterations=run.iterations,
        full_val_iterations=run.full_val_iterations,
        proposals=run.proposals,
        accepted=run.accepted,
        metric_calls=run.metric_calls,
        stage_time=stage_time,
        utilisation=run.busy / (scenario.workers * wall_clock) if wall_clock > 0 else 0.0,
    )
