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

It is slow on purpose; the tests compare the two in distribution.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from pxn.scenario import Distribution, Scenario, Shape


@dataclass(frozen=True)
class OracleResult:
    wall_clock: float
    iterations: int
    full_val_iterations: int
    proposals: int
    accepted: int
    metric_calls: int


class OracleRun:
    def __init__(self, scenario: Scenario, shape: Shape, rng: np.random.Generator):
        self.scenario = scenario
        self.shape = shape
        self.rng = rng
        self.env = simpy.Environment()
        self.workers = simpy.Resource(self.env, capacity=scenario.workers)
        self.reflectors = simpy.Resource(self.env, capacity=scenario.reflection_concurrency)
        # The LM backend: a server per call being served; unlimited is a place per call.
        self.servers = simpy.Resource(self.env, capacity=scenario.lm_servers or 10**9)
        self.serving = 0  # calls holding an LM server right now
        self.metric_calls = 0
        self.iterations = 0
        self.full_val_iterations = 0
        self.proposals = 0
        self.accepted = 0

    def call(self, pool: simpy.Resource, seconds: float) -> Generator[simpy.Event, None, None]:
        """One rollout or reflection: a free slot, then an LM server, held while served."""
        with pool.request() as slot:
            yield slot
            with self.servers.request() as server:
                yield server
                self.serving += 1
                beta = self.scenario.load_slowdown
                if beta:
                    # Let every call granted a server at this same instant count
                    # itself first: a zero wait runs after the grants already queued.
                    yield self.env.timeout(0)
                    seconds *= 1 + beta * (self.serving - 1)
                yield self.env.timeout(seconds)
                self.serving -= 1  # before the server is released to the next call

    def stage(
        self, pool: simpy.Resource, latency: Distribution, calls: int
    ) -> Generator[simpy.Event, None, None]:
        """gepa's own work, then `calls` concurrent calls, then the barrier."""
        yield self.env.timeout(self.scenario.stage_overhead)
        seconds = latency.sample(self.rng, calls)
        yield self.env.all_of([self.env.process(self.call(pool, s)) for s in seconds])

    def evaluate(self, rollouts: int) -> Generator[simpy.Event, None, None]:
        yield from self.stage(self.workers, self.scenario.rollout, rollouts)
        self.metric_calls += rollouts  # every rollout is one metric call

    def reflect(self, calls: int) -> Generator[simpy.Event, None, None]:
        yield from self.stage(self.reflectors, self.scenario.reflection, calls)  # not counted

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
        selection = self.scenario.selection
        if selection == "all":
            return passing
        limit = 1 if selection == "best" else int(selection.removeprefix("topk:"))
        return min(passing, limit)

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
    )


def oracle_replicates(scenario: Scenario, shape: Shape, replicates: int, seed: int = 2024):
    """`replicates` independent runs, each on its own stream (unrelated to the fast model's)."""
    return [
        oracle_once(scenario, shape, np.random.default_rng([seed, r])) for r in range(replicates)
    ]
