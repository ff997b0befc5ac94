"""The SimPy model of one batched gepa 0.1.4 run on a finite worker pool.

`gepa_run` is the process: it reads like `GEPAEngine.run` with `PxNSampling`.
Each stage is one barrier-to-barrier step; its rollouts are list-scheduled
onto the W worker slots in one go (see schedule.py), so a replicate costs a
few SimPy events per stage instead of one process per rollout. A local LM
pool (Scenario.lm_servers) narrows the slots; its load_slowdown stretches the
calls of a busy stage (see SimulatedRun.slowed).

Dollars and provider limits cost nothing unless the scenario has them: token
counts are drawn only when there are prices or a tokens-per-minute limit (from
a stream of their own, so pricing a run does not change its timing), and a
stage goes through the rate-limited schedule only when there is a limit.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from pxn.distribution import Distribution
from pxn.load import Load
from pxn.rate_limits import RateLimit
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.schedule import Bucket, list_schedule, makespan, rate_limited_schedule
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


class Draws:
    """Values (latencies, token counts) drawn from a distribution in blocks.

    One scipy call serves many stages. Kept as a Python list: stages take a few
    draws at a time, and list slices are cheaper than numpy views at that size.
    """

    BLOCK = 4096

    def __init__(self, distribution: Distribution, rng: np.random.Generator):
        self.distribution = distribution
        self.rng = rng
        self.block: list[float] = []
        self.used = 0

    def take(self, n: int) -> list[float]:
        if self.used + n > len(self.block):
            self.block = self.distribution.sample(self.rng, max(n, self.BLOCK)).tolist()
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
    reflections_made: int = 0
    throttled_calls: int = 0  # calls that waited for rate-limit capacity
    # Tokens paid for, summed over the run (when drawn): rollouts' input and
    # output, reflections' output (their input is a constant per call).
    task_tokens_in: float = 0.0
    task_tokens_out: float = 0.0
    reflection_tokens_out: float = 0.0

    def __post_init__(self) -> None:
        scenario = self.scenario
        self.rollouts = Draws(scenario.rollout, self.rng)
        self.reflections = Draws(scenario.reflection, self.rng)
        tokens, limits = scenario.tokens, scenario.rate_limits
        # A reflection at this b reads more (or less) than at the measured b.
        self.reflection_shift = 0.0
        if tokens is not None:
            self.reflection_shift = tokens.reflection_latency_shift(scenario.minibatch)
        self.draws_tokens = tokens is not None and (
            scenario.prices is not None
            or limits.task.tpm is not None
            or limits.reflection.tpm is not None
        )
        if self.draws_tokens:
            assert tokens is not None
            # A stream of their own (spawned, not drawn, from the replicate's seed),
            # so drawing tokens leaves every latency and acceptance draw as it was.
            token_rng = np.random.default_rng(self.rng.bit_generator.seed_seq.spawn(1)[0])
            self.rollout_tokens_in = Draws(tokens.rollout_input, token_rng)
            self.rollout_tokens_out = Draws(tokens.rollout_output, token_rng)
            self.reflection_tokens = Draws(tokens.reflection_output, token_rng)
            self.reflection_tokens_in = tokens.reflection_input(scenario.minibatch)
        # The provider's token buckets, one per limit, kept for the whole run.
        self.task_buckets = self._buckets(limits.task)
        self.reflection_buckets = self._buckets(limits.reflection)
        self.task_limited = self.task_buckets != (None, None)
        self.reflection_limited = self.reflection_buckets != (None, None)
        # Calls a stage serves at once: its own cap, or fewer when the LM pool is smaller.
        loads = self.scenario.loads
        self.rollout_slots = loads.task.slots(self.scenario.workers)
        self.reflection_slots = loads.reflection.slots(self.scenario.reflection_concurrency)
        # The trainset's example ids twice over, so a minibatch that wraps around
        # the end of an epoch is one slice.
        names = [f"train:{i}" for i in range(self.scenario.trainset_size)]
        self.train_twice = names + names

    def _buckets(self, limit: RateLimit) -> tuple[Bucket | None, Bucket | None]:
        """(requests bucket, tokens bucket) for one model; None where it has no limit."""
        burst = self.scenario.rate_limits.burst_seconds
        return (
            None if limit.rpm is None else Bucket(limit.rpm, burst),
            None if limit.tpm is None else Bucket(limit.tpm, burst),
        )

    # -- the stages ---------------------------------------------------------

    def slowed(self, durations: list[float], slots: int, load: Load) -> list[float]:
        """The latencies of a stage's calls, slowed by the load they start under.

        A call that starts while m calls are served (itself included) takes
        1 + beta (m - 1) times its draw. In a list-scheduled stage of n calls on
        s slots every call starts with min(n, s) in flight: all start together
        when n <= s, and each later one takes a slot the moment it frees while
        the others are still busy. The approximation: the factor is fixed at the
        start, so the last calls of a draining stage keep it while fewer run
        (and a stage throttled by a rate limit runs fewer at once than this).
        """
        factor = load.factor(min(len(durations), slots))
        return [d * factor for d in durations]

    def limited_schedule(
        self,
        durations: list[float],
        slots: int,
        stage_start: float,
        buckets: tuple[Bucket | None, Bucket | None],
        tokens: list[float] | None,
    ) -> tuple[float, list[float], list[int]]:
        """A rate-limited stage's length, and its calls' starts (from the stage's start) and slots.

        Each call also waits until its model's buckets can pay for it: one
        request, and `tokens` (its input plus output) against a tokens-per-minute
        limit.
        """
        requests, token_bucket = buckets
        charges: list[tuple[Bucket, list[float] | float]] = []
        if requests is not None:
            charges.append((requests, 1.0))
        if token_bucket is not None:
            assert tokens is not None
            charges.append((token_bucket, tokens))
        begins, slot_of, throttled = rate_limited_schedule(durations, slots, stage_start, charges)
        self.throttled_calls += throttled
        end = max((b + d for b, d in zip(begins, durations, strict=True)), default=stage_start)
        return end - stage_start, [b - stage_start for b in begins], slot_of

    def evaluate(
        self, iteration: int, phase: str, items: list[tuple[str, list[str]]]
    ) -> Generator[simpy.Event, None, None]:
        """One batch_evaluate call: every (candidate, examples) item, W (and lm_servers) at once."""
        n = sum(len(examples) for _, examples in items)
        slots = self.rollout_slots
        durations = self.rollouts.take(n)
        if self.scenario.loads.task.slowdown:  # no extra work at the default
            durations = self.slowed(durations, slots, self.scenario.loads.task)
        tokens_in = tokens_out = tokens = None
        if self.draws_tokens:
            tokens_in = self.rollout_tokens_in.take(n)
            tokens_out = self.rollout_tokens_out.take(n)
            self.task_tokens_in += sum(tokens_in)
            self.task_tokens_out += sum(tokens_out)
            if self.task_buckets[1] is not None:
                tokens = [i + o for i, o in zip(tokens_in, tokens_out, strict=True)]
        stage_start = self.env.now + self.scenario.stage_overhead
        if self.task_limited:
            length, starts, workers = self.limited_schedule(
                durations, slots, stage_start, self.task_buckets, tokens
            )
        else:
            length = makespan(durations, slots)
        yield self.env.timeout(self.scenario.stage_overhead + length)
        self.metric_calls += n
        self.busy += total(durations)
        self.stage_time[phase] += length
        if self.trace:
            # The slot a rollout runs on is a worker slot: with fewer LM servers
            # than workers, only the first `slots` workers' calls are ever served.
            if not self.task_limited:
                starts, workers = list_schedule(durations, slots)
            calls = [(cand, ex) for cand, examples in items for ex in examples]
            for i, ((candidate, example), start, duration, worker) in enumerate(
                zip(calls, starts, durations, workers, strict=True)
            ):
                begin = stage_start + start
                spent = {}
                if tokens_in is not None and tokens_out is not None:
                    spent = self._spent(tokens_in[i], tokens_out[i], "task")
                self.trace.write(
                    Rollout(
                        start=begin,
                        end=begin + duration,
                        iteration=iteration,
                        phase=phase,
                        worker=worker,
                        candidate=candidate,
                        example=example,
                        **spent,
                    )
                )
            self._write_stage(iteration, phase, stage_start)

    def reflect(self, iteration: int, tasks: list[Task]) -> Generator[simpy.Event, None, None]:
        """One reflection call per task, at most C (and lm_servers) at once."""
        slots = self.reflection_slots
        durations = self.reflections.take(len(tasks))
        if self.reflection_shift:  # its input grows with b (tokens.reflection_latency_shift)
            shift = self.reflection_shift
            durations = [max(0.0, d + shift) for d in durations]
        if self.scenario.loads.reflection.slowdown:  # no extra work at the default
            durations = self.slowed(durations, slots, self.scenario.loads.reflection)
        self.reflections_made += len(tasks)
        tokens_out = tokens = None
        if self.draws_tokens:
            tokens_out = self.reflection_tokens.take(len(tasks))
            self.reflection_tokens_out += sum(tokens_out)
            if self.reflection_buckets[1] is not None:
                tokens = [self.reflection_tokens_in + o for o in tokens_out]
        stage_start = self.env.now + self.scenario.stage_overhead
        if self.reflection_limited:
            length, starts, slot_of = self.limited_schedule(
                durations, slots, stage_start, self.reflection_buckets, tokens
            )
        else:
            length = makespan(durations, slots)
        yield self.env.timeout(self.scenario.stage_overhead + length)
        self.stage_time["reflection"] += length
        if self.trace:
            if not self.reflection_limited:
                starts, slot_of = list_schedule(durations, slots)
            for i, (task, start, duration, slot) in enumerate(
                zip(tasks, starts, durations, slot_of, strict=True)
            ):
                begin = stage_start + start
                spent = {}
                if tokens_out is not None:
                    spent = self._spent(self.reflection_tokens_in, tokens_out[i], "reflection")
                self.trace.write(
                    Reflection(
                        start=begin,
                        end=begin + duration,
                        iteration=iteration,
                        slot=slot,
                        proposal=task.proposal,
                        parent=task.parent,
                        **spent,
                    )
                )
            self._write_stage(iteration, "reflection", stage_start)

    def _spent(self, tokens_in: float, tokens_out: float, role: str) -> dict[str, Any]:
        """A call's trace fields for what it used: whole tokens, and dollars when priced."""
        spent: dict[str, Any] = {"tokens_in": round(tokens_in), "tokens_out": round(tokens_out)}
        prices = self.scenario.prices
        if prices is not None:
            spent["cost"] = prices.dollars(role, tokens_in, tokens_out)
        return spent

    def dollars(self) -> float | None:
        """What the run's calls cost (None without prices)."""
        prices = self.scenario.prices
        if prices is None:
            return None
        return prices.dollars("task", self.task_tokens_in, self.task_tokens_out) + prices.dollars(
            "reflection",
            self.reflection_tokens_in * self.reflections_made,
            self.reflection_tokens_out,
        )

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
        limit = self.scenario.selection.limit
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
    """Simulate one replicate; write its trace too when a writer is given.

    With parameter uncertainty, replicate r runs the scenario's draw r mod D.
    """
    scenario = scenario.for_replicate(replicate)
    env = simpy.Environment()
    run = SimulatedRun(env, scenario, shape, replicate_rng(scenario.seed, replicate), trace)
    if trace:
        servers = scenario.loads.task.servers
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
                | ({} if servers is None else {"lm_servers": servers}),
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
        dollars=run.dollars(),
        throttled_calls=run.throttled_calls,
    )
