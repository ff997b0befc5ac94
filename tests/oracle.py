"""An independent, per-rollout SimPy model of one batched gepa 0.1.4 run.

The fast simulator (pxn.sim.model) list-schedules a whole stage in one step.
This oracle does the obvious thing instead: every rollout is its own SimPy
process queueing FIFO for one of W worker slots (a `simpy.Resource`), every
reflection a process on a Resource of `reflection_concurrency` slots, and each
stage ends at a barrier (`env.all_of`). A local LM pool is one more Resource
of `lm_servers` places that every call holds while it is served; the load
slowdown is read from a count of the calls being served. It is written from the issue's
description of a gepa iteration, not from pxn.sim.model, and shares only the
Scenario (for sampling latencies), so agreement between the two is evidence.

Provider rate limits are a `Limiter` per model: a FIFO gate (a Resource of
one place) in front of its token buckets. A call that holds a worker slot
queues at the gate, then, like a client that backs off on 429s, checks
whether every bucket can pay, sleeps for the missing allowance and checks
again. Token counts are drawn per call when the scenario prices them or has
a tokens-per-minute limit; a reflection's latency is shifted for its b.

It is slow on purpose; the tests compare the two in distribution.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from pxn.distribution import Distribution
from pxn.scenario import Scenario
from pxn.shape import Shape


@dataclass(frozen=True)
class OracleResult:
    wall_clock: float
    iterations: int
    full_val_iterations: int
    proposals: int
    accepted: int
    metric_calls: int
    dollars: float | None = None
    throttled_calls: int = 0


class Limiter:
    """One model's rate limits: buckets of per-minute allowance behind a FIFO gate.

    A bucket holds burst_seconds of its allowance, starts full and refills
    continuously. A call asking more than a bucket holds waits for it to be
    full and leaves it in debt.
    """

    def __init__(self, env: simpy.Environment, per_minute: list[float], burst_seconds: float):
        self.env = env
        self.gate = simpy.Resource(env, capacity=1)
        self.rates = [limit / 60 for limit in per_minute]
        self.capacities = [limit * burst_seconds / 60 for limit in per_minute]
        self.levels = list(self.capacities)
        self.checked = 0.0  # when the levels were last brought up to date

    def refill(self) -> None:
        elapsed = self.env.now - self.checked
        self.levels = [
            min(cap, level + rate * elapsed)
            for level, rate, cap in zip(self.levels, self.rates, self.capacities, strict=True)
        ]
        self.checked = self.env.now

    def acquire(self, amounts: list[float]) -> Generator[simpy.Event, None, None]:
        """Wait, in turn, until every bucket can pay its amount; then pay."""
        with self.gate.request() as turn:
            yield turn
            while True:
                self.refill()
                waits = [
                    (min(amount, cap) - level) / rate
                    for amount, level, rate, cap in zip(
                        amounts, self.levels, self.rates, self.capacities, strict=True
                    )
                ]
                if max(waits) <= 1e-9:
                    break
                yield self.env.timeout(max(waits))
            self.levels = [
                level - amount for level, amount in zip(self.levels, amounts, strict=True)
            ]


class OracleRun:
    def __init__(self, scenario: Scenario, shape: Shape, rng: np.random.Generator):
        self.scenario = scenario
        self.shape = shape
        self.rng = rng
        self.env = simpy.Environment()
        self.workers = simpy.Resource(self.env, capacity=scenario.workers)
        self.reflectors = simpy.Resource(self.env, capacity=scenario.reflection_concurrency)
        # The LM backend: a server per call being served; unlimited is a place per call.
        # One pool for both models: rollouts and reflections never overlap.
        self.servers = simpy.Resource(self.env, capacity=scenario.loads.task.servers or 10**9)
        self.serving = 0  # calls holding an LM server right now
        # Provider limits, per model: (limiter, whether its last bucket counts tokens).
        self.task_limits = self.limiter(scenario.rate_limits.task)
        self.reflection_limits = self.limiter(scenario.rate_limits.reflection)
        tokens = scenario.tokens
        self.counts_tokens = tokens is not None and (
            scenario.prices is not None
            or scenario.rate_limits.task.tpm is not None
            or scenario.rate_limits.reflection.tpm is not None
        )
        self.dollars = 0.0
        self.throttled_calls = 0
        self.metric_calls = 0
        self.iterations = 0
        self.full_val_iterations = 0
        self.proposals = 0
        self.accepted = 0

    def limiter(self, limit) -> Limiter | None:
        per_minute = [x for x in (limit.rpm, limit.tpm) if x is not None]
        if not per_minute:
            return None
        return Limiter(self.env, per_minute, self.scenario.rate_limits.burst_seconds)

    def call(
        self,
        pool: simpy.Resource,
        seconds: float,
        limits: tuple[Limiter, list[float]] | None = None,
    ) -> Generator[simpy.Event, None, None]:
        """One rollout or reflection: a free slot, the provider's allowance, an LM server."""
        with pool.request() as slot:
            yield slot
            if limits is not None:
                limiter, amounts = limits
                granted = self.env.now
                yield from limiter.acquire(amounts)
                if self.env.now > granted:
                    self.throttled_calls += 1
            with self.servers.request() as server:
                yield server
                self.serving += 1
                beta = self.scenario.loads.task.slowdown
                if beta:
                    # Let every call granted a server at this same instant count
                    # itself first: a zero wait runs after the grants already queued.
                    yield self.env.timeout(0)
                    seconds *= 1 + beta * (self.serving - 1)
                yield self.env.timeout(seconds)
                self.serving -= 1  # before the server is released to the next call

    def stage(
        self, pool: simpy.Resource, latency: Distribution, calls: int, model: str
    ) -> Generator[simpy.Event, None, None]:
        """gepa's own work, then `calls` concurrent calls, then the barrier."""
        s = self.scenario
        yield self.env.timeout(s.stage_overhead)
        seconds = latency.sample(self.rng, calls)
        if model == "reflection" and s.tokens is not None:
            seconds = np.maximum(0.0, seconds + s.tokens.reflection_latency_shift(s.minibatch))
        used_in, used_out = np.zeros(calls), np.zeros(calls)
        if self.counts_tokens:
            tokens = s.tokens
            if model == "task":
                used_in = tokens.rollout_input.sample(self.rng, calls)
                used_out = tokens.rollout_output.sample(self.rng, calls)
            else:
                used_in = np.full(calls, tokens.reflection_input(s.minibatch))
                used_out = tokens.reflection_output.sample(self.rng, calls)
            if s.prices is not None:
                price_in, price_out = (
                    (s.prices.task_input, s.prices.task_output)
                    if model == "task"
                    else (s.prices.reflection_input, s.prices.reflection_output)
                )
                self.dollars += float((used_in * price_in + used_out * price_out).sum()) / 1e6
        limit = s.rate_limits.task if model == "task" else s.rate_limits.reflection
        limiter = self.task_limits if model == "task" else self.reflection_limits
        processes = []
        for i, latency_i in enumerate(seconds):
            charge = None
            if limiter is not None:
                amounts = [1.0] if limit.rpm is not None else []
                if limit.tpm is not None:
                    amounts.append(float(used_in[i] + used_out[i]))
                charge = (limiter, amounts)
            processes.append(self.env.process(self.call(pool, latency_i, charge)))
        yield self.env.all_of(processes)

    def evaluate(self, rollouts: int) -> Generator[simpy.Event, None, None]:
        yield from self.stage(self.workers, self.scenario.rollout, rollouts, "task")
        self.metric_calls += rollouts  # every rollout is one metric call

    def reflect(self, calls: int) -> Generator[simpy.Event, None, None]:
        # Not metric calls.
        yield from self.stage(self.reflectors, self.scenario.reflection, calls, "reflection")

    def accepted_children(self, judged: int) -> int:
        """How many of `judged` children beat their parent and are selected for full val."""
        acceptance = self.scenario.acceptance
        made = self.proposals + np.arange(judged)  # proposals made before each one
        if acceptance.tau is None:
            chance = np.full(judged, acceptance.a0)
        else:
            chance = acceptance.a0 * np.exp(-made / acceptance.tau)
        self.proposals += judged
        passing = int((self.rng.random(judged) < chance).sum())
        limit = self.scenario.selection.limit
        return passing if limit is None else min(passing, limit)

    def run(self) -> Generator[simpy.Event, None, None]:
        s, k = self.scenario, self.shape.k
        yield from self.evaluate(s.valset_size)  # the seed's validation, before iteration 0
        while self.metric_calls < s.budget:  # checked only at the top of an iteration
            self.iterations += 1
            yield from self.evaluate(k * s.minibatch)  # parents on their minibatches
            # A parent perfect on its whole minibatch is skipped (no reflection, no child).
            tasks = int((self.rng.random(k) >= s.skip_perfect).sum()) if s.skip_perfect else k
            if tasks == 0:
                continue
            yield from self.reflect(tasks)
            yield from self.evaluate(tasks * s.minibatch)  # children on the same minibatches
            selected = self.accepted_children(tasks)
            if selected:
                yield from self.evaluate(selected * s.valset_size)
                self.full_val_iterations += 1
                self.accepted += selected


def oracle_once(scenario: Scenario, shape: Shape, rng: np.random.Generator) -> OracleResult:
    run = OracleRun(scenario, shape, rng)
    run.env.process(run.run())
    run.env.run()
    return OracleResult(
        wall_clock=run.env.now,
        iterations=run.iterations,
        full_val_iterations=run.full_val_iterations,
        proposals=run.proposals,
        accepted=run.accepted,
        metric_calls=run.metric_calls,
        dollars=run.dollars if scenario.prices is not None else None,
        throttled_calls=run.throttled_calls,
    )


def oracle_replicates(scenario: Scenario, shape: Shape, replicates: int, seed: int = 2024):
    """`replicates` independent runs, each on its own stream (unrelated to the fast model's)."""
    return [
        oracle_once(scenario, shape, np.random.default_rng([seed, r])) for r in range(replicates)
    ]
