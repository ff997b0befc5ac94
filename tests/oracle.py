"""An independent, per-call SimPy model of one batched gepa 0.1.4 run.

The fast simulator (pxn.sim) list-schedules a whole stage in one step. This
oracle does the obvious thing instead, written from the description of a
gepa iteration and of each effect, not from pxn.sim; it shares only the
Scenario (its distributions are sampled through Distribution.sample, caps
included), so agreement between the two is evidence.

Calls. Every rollout and reflection is its own SimPy process. A call takes
one of its model's worker slots (a Resource of W, or of C for reflections,
FIFO), then one particular LM server of its model (a FIFO Store of server
ids, in id order at the start: the longest-waiting call gets the server
free the longest; no wait without `servers`), then waits at its model's
provider limits (a `Limiter`: a FIFO gate in front of token buckets; a
client backing off on its 429s checks whether every bucket can pay, sleeps
for the missing allowance, checks again) still holding both, then runs. Its
latency is its draw times 1 + slowdown (m - 1), m being the calls of its
model being served at its start, itself and every call that starts in the
same instant included: the call waits for the end of the instant (an event
of the lowest priority) and then reads the count. Stages end at a barrier
(`env.all_of`).

Split workers (worker_split = "per_candidate", dspy.GEPA's batch_evaluate).
In the parent, child and validation stages each candidate evaluated (a
parent on its minibatch, a child on its, a new candidate on the valset) is
one DSPy evaluation: min(candidates, W) of them run at once (a Resource of
that many places, FIFO in gepa's order) and each has its own threads, W
divided evenly among the places, the first W mod places candidates one
more (a Resource of its own, instead of the W slots); its calls then take
a server and run as any call does. The seed's validation uses all W.

The prefix cache. Each server remembers the parent of the reflection it
served last in the current reflection stage (rollouts run between two such
stages, so the memory is cleared at each one's start). A reflection that
gets a server whose last reflection had the same parent (the same candidate,
so its prompt starts with the same template and parent text) has its draw
shortened by prefix_seconds, floored at 0, before the load factor applies.

gepa's bookkeeping, kept here on its own terms:
- the trainset ids are shuffled each epoch and padded to a multiple of b
  with the least used ids; the c-th minibatch of the iteration with 0-based
  index s starts at (s b + c b) mod (padded length); the epoch advances with
  s b // (padded length);
- the P parents are drawn uniformly from the newest ceil(front_share x pool)
  candidates (at least one);
- the parent stage evaluates each distinct (parent, minibatch ids) once, and
  a pair is perfect (all its tasks skipped) with chance skip_perfect;
- the step's proposals share the acceptance a0 exp(-min(i, decay_until)/tau)
  of the i proposals judged before the step, times `batched` (at most 1) when
  the shape proposes more than one at a time; with correlation rho the step's
  rate is drawn from Beta(a (1/rho - 1), (1 - a)(1/rho - 1));
- the first `limit` accepted are selected; each selected after the first is a
  copy of an earlier one with chance duplicate_children and is dropped; the
  rest are validated on the whole valset and join the pool.

A run's conditions. Before its first call a run draws one standard normal z;
every call of a model with run_spread s takes exp(s z - s^2 / 2) times its
draw (after the reflection's shift, before the prefix cache and the load).

The quality model (scenario.quality, pxn.quality's definitions). Every
candidate's quality and its residuals on every train and validation example
are drawn whole when it is proposed (a child: its parent's quality moved by
the reach left to it, its residuals inherit times its parent's plus fresh
ones); the example difficulties once per run. An evaluation is one fresh
latent per example scored by the metric. gepa's rules, on those scores: the
parents are drawn from gepa's Pareto front (per validation example the
candidates with its best score; a candidate every one of whose fronts holds
another remaining candidate is removed, lowest mean validation score first,
scanning again after each removal; each remaining one drawn with weight the
fronts it is on); a (parent, minibatch) pair whose scores are all 1 is
skipped; a child passes when its minibatch sum beats its parent's; `best`
and `topk` keep the most improved; the run's result is the candidate of the
highest mean validation score, its test score the expected score of its
quality. Merges are not modelled here.

It is slow on purpose; the tests compare the two in distribution.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy
from simpy.events import Event, EventPriority

from pxn.distribution import Distribution
from pxn.quality import Quality
from pxn.scenario import Scenario
from pxn.shape import Shape

LAST_IN_INSTANT = EventPriority(2)  # below simpy's NORMAL (1) and URGENT (0)


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
    best_score: float | None = None  # under the quality model
    test_score: float | None = None


class EndOfInstant(Event):
    """Fires at the current time once every other event of this instant has run."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LAST_IN_INSTANT)


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


class Model:
    """One LM as the calls see it: worker slots, servers, provider limits, its load."""

    def __init__(self, run: OracleRun, role: str, slots: int):
        s = run.scenario
        load = s.loads.task if role == "task" else s.loads.reflection
        limit = s.rate_limits.task if role == "task" else s.rate_limits.reflection
        self.role = role
        self.slots = simpy.Resource(run.env, capacity=slots)
        self.servers = None if load.servers is None else simpy.Store(run.env)
        if self.servers is not None:
            self.servers.items.extend(range(load.servers))
        self.last_parent: dict[int, int] = {}  # server -> parent it served last in this stage
        self.prefix_seconds = load.prefix_seconds
        self.slowdown = load.slowdown
        self.conditions = math.exp(load.run_spread * run.z - load.run_spread**2 / 2)
        self.serving = 0  # calls of this model running right now
        self.asks_requests = limit.rpm is not None
        self.asks_tokens = limit.tpm is not None
        per_minute = [x for x in (limit.rpm, limit.tpm) if x is not None]
        self.limiter = (
            Limiter(run.env, per_minute, s.rate_limits.burst_seconds) if per_minute else None
        )


Child = tuple[float, np.ndarray, np.ndarray]  # quality, train residuals, validation residuals


class Candidates:
    """The quality model's candidates, each drawn whole when proposed, and gepa's front."""

    def __init__(self, quality: Quality, trainset: int, valset: int, rng: np.random.Generator):
        self.model, self.rng = quality, rng
        self.train_difficulty = rng.normal(0.0, quality.difficulty_sd, trainset)
        self.val_difficulty = rng.normal(0.0, quality.difficulty_sd, valset)
        self.quality = [quality.seed_quality]
        self.train_residuals = [rng.standard_normal(trainset)]
        self.val_residuals = [rng.standard_normal(valset)]
        self.validated: list[np.ndarray] = []

    def scores(self, quality: float, difficulty: np.ndarray, residuals: np.ndarray) -> np.ndarray:
        """One evaluation: a fresh latent per example, scored by the metric."""
        noise = self.model.eval_noise * self.rng.standard_normal(len(difficulty))
        return self.model.score(quality - difficulty + residuals + noise)

    def evaluate(self, candidate: int, ids: tuple[int, ...]) -> np.ndarray:
        rows = list(ids)
        return self.scores(
            self.quality[candidate],
            self.train_difficulty[rows],
            self.train_residuals[candidate][rows],
        )

    def propose(self, parent: int) -> Child:
        model, rng = self.model, self.rng
        theta = self.quality[parent]
        theta += model.reach(theta) * (model.change_mean + model.change_sd * rng.standard_normal())
        fresh = math.sqrt(1 - model.inherit**2)
        train = self.train_residuals[parent]
        val = self.val_residuals[parent]
        return (
            theta,
            model.inherit * train + fresh * rng.standard_normal(len(train)),
            model.inherit * val + fresh * rng.standard_normal(len(val)),
        )

    def score_child(self, child: Child, ids: tuple[int, ...]) -> np.ndarray:
        rows = list(ids)
        return self.scores(child[0], self.train_difficulty[rows], child[1][rows])

    def join(self, child: Child) -> None:
        self.quality.append(child[0])
        self.train_residuals.append(child[1])
        self.val_residuals.append(child[2])
        self.validate(len(self.quality) - 1)

    def validate(self, candidate: int) -> None:
        self.validated.append(
            self.scores(self.quality[candidate], self.val_difficulty, self.val_residuals[candidate])
        )

    def parents(self, count: int) -> list[int]:
        table = np.stack(self.validated)  # candidate x example
        fronts = [set(np.flatnonzero(column == column.max()).tolist()) for column in table.T]
        means = table.mean(axis=1)
        remaining = set(range(len(table)))
        removed = True
        while removed:
            removed = False
            for c in sorted(remaining, key=lambda c: (means[c], c)):
                if all(len(front & remaining) > 1 for front in fronts if c in front):
                    remaining.discard(c)
                    removed = True
                    break
        kept = sorted(remaining)
        weights = np.array([sum(c in front for front in fronts) for c in kept], float)
        return [kept[i] for i in self.rng.choice(len(kept), count, p=weights / weights.sum())]

    def result(self) -> tuple[float, float]:
        """(best validation score, its candidate's test score)."""
        means = [float(v.mean()) for v in self.validated]
        best = means.index(max(means))
        return means[best], self.model.expected_score(self.quality[best])


class OracleRun:
    def __init__(self, scenario: Scenario, shape: Shape, rng: np.random.Generator):
        self.scenario = scenario
        self.shape = shape
        self.rng = rng
        self.env = simpy.Environment()
        spread = scenario.loads.task.run_spread or scenario.loads.reflection.run_spread
        self.z = rng.standard_normal() if spread else 0.0  # this run's conditions
        self.task = Model(self, "task", scenario.workers)
        self.reflection = Model(self, "reflection", scenario.reflection_concurrency)
        tokens, limits = scenario.tokens, scenario.rate_limits
        self.counts_tokens = tokens is not None and (
            scenario.prices is not None
            or limits.task.tpm is not None
            or limits.reflection.tpm is not None
        )
        self.candidates = (
            None
            if scenario.quality is None
            else Candidates(
                scenario.quality, scenario.trainset_size, scenario.valset_size, self.rng
            )
        )
        self.pool = [0]  # candidate ids, oldest first; the seed is 0
        self.shuffled: list[int] = []
        self.epoch = -1
        self.dollars = 0.0
        self.throttled_calls = 0
        self.metric_calls = 0
        self.iterations = 0
        self.full_val_iterations = 0
        self.proposals = 0
        self.accepted = 0

    # -- calls and stages -------------------------------------------------------

    def call(
        self,
        model: Model,
        seconds: float,
        tokens: float,
        parent: int | None,
        slots: simpy.Resource | None = None,
    ) -> Generator[simpy.Event, None, None]:
        """A rollout, or a reflection of `parent`: a slot (of `slots`, else of the model's
        W or C), a server, the allowance, the run."""
        with (model.slots if slots is None else slots).request() as slot:
            yield slot
            server = None if model.servers is None else (yield model.servers.get())
            if server is not None and parent is not None:
                if model.last_parent.get(server) == parent:  # its prompt's prefix is cached
                    seconds = max(0.0, seconds - model.prefix_seconds)
                model.last_parent[server] = parent
            if model.limiter is not None:
                amounts = [1.0] if model.asks_requests else []
                if model.asks_tokens:
                    amounts.append(tokens)
                granted = self.env.now
                yield from model.limiter.acquire(amounts)
                if self.env.now > granted:
                    self.throttled_calls += 1
            model.serving += 1
            if model.slowdown:
                yield EndOfInstant(self.env)  # every call starting now is counted
                seconds *= 1 + model.slowdown * (model.serving - 1)
            yield self.env.timeout(seconds)
            model.serving -= 1
            if server is not None:
                model.servers.put(server)  # to the next waiting call, as a release would

    def stage(
        self,
        model: Model,
        latency: Distribution,
        parents: list[int | None],
        per_candidate: int | None = None,
    ) -> Generator[simpy.Event, None, None]:
        """gepa's own work, then one concurrent call per parent given, then the barrier.

        A rollout's parent is None: only reflections are served from a cached prefix.
        `per_candidate`: the calls are that many per candidate, each candidate on its own
        threads (split workers).
        """
        s = self.scenario
        calls = len(parents)
        yield self.env.timeout(s.stage_overhead)
        model.last_parent.clear()  # the servers have run other calls since
        seconds = latency.sample(self.rng, calls)
        if model.role == "reflection" and s.tokens is not None:
            seconds = np.maximum(0.0, seconds + s.tokens.reflection_latency_shift(s.minibatch))
        seconds = seconds * model.conditions
        used_in, used_out = np.zeros(calls), np.zeros(calls)
        if self.counts_tokens:
            tokens = s.tokens
            if model.role == "task":
                used_in = tokens.rollout_input.sample(self.rng, calls)
                used_out = tokens.rollout_output.sample(self.rng, calls)
            else:
                used_in = np.full(calls, tokens.reflection_input(s.minibatch))
                used_out = tokens.reflection_output.sample(self.rng, calls)
            if s.prices is not None:
                price_in, price_out = (
                    (s.prices.task_input, s.prices.task_output)
                    if model.role == "task"
                    else (s.prices.reflection_input, s.prices.reflection_output)
                )
                self.dollars += float((used_in * price_in + used_out * price_out).sum()) / 1e6

        def run(i: int, slots: simpy.Resource | None = None) -> simpy.Process:
            work = float(used_in[i] + used_out[i])
            return self.env.process(self.call(model, float(seconds[i]), work, parents[i], slots))

        if per_candidate is None:
            yield self.env.all_of([run(i) for i in range(calls)])
            return
        candidates = calls // per_candidate
        at_once = min(candidates, s.workers)
        places = simpy.Resource(self.env, capacity=at_once)
        threads = [s.workers // at_once + (c < s.workers % at_once) for c in range(candidates)]

        def candidate(c: int) -> Generator[simpy.Event, None, None]:
            with places.request() as place:
                yield place
                own = simpy.Resource(self.env, capacity=threads[c])
                first = c * per_candidate
                yield self.env.all_of([run(i, own) for i in range(first, first + per_candidate)])

        yield self.env.all_of([self.env.process(candidate(c)) for c in range(candidates)])

    def evaluate(
        self, phase: str, candidates: int, per_candidate: int
    ) -> Generator[simpy.Event, None, None]:
        """`candidates` evaluated on `per_candidate` examples each."""
        latency = self.scenario.rollout_latency(phase)
        rollouts = candidates * per_candidate
        split = self.scenario.worker_split == "per_candidate" and phase != "seed_val"
        own = per_candidate if split else None
        yield from self.stage(self.task, latency, [None] * rollouts, own)
        self.metric_calls += rollouts  # every rollout is one metric call

    def reflect(self, parents: list[int]) -> Generator[simpy.Event, None, None]:
        """One reflection per task, given the tasks' parents in gepa's order (not metric calls)."""
        yield from self.stage(self.reflection, self.scenario.reflection, list(parents))

    # -- gepa's bookkeeping -------------------------------------------------------

    def minibatch(self, step: int, call: int) -> tuple[int, ...]:
        """The ids of the call-th minibatch of the iteration with 0-based index `step`."""
        b, size = self.scenario.minibatch, self.scenario.trainset_size
        base = step * b
        epoch = 0 if self.epoch == -1 else base // len(self.shuffled)
        if not self.shuffled or epoch > self.epoch:
            self.epoch = epoch
            self.shuffled = self.rng.permutation(size).tolist()
            used = Counter(self.shuffled)
            while len(self.shuffled) % b:
                least = min(used, key=lambda i: (used[i], -self.shuffled.index(i)))
                self.shuffled.append(least)
                used[least] += 1
        first = (base + call * b) % len(self.shuffled)
        return tuple(self.shuffled[first : first + b])

    def parents(self) -> list[int]:
        if self.candidates is not None:
            return self.candidates.parents(self.shape.p)
        front = max(1, math.ceil(self.scenario.front_share * len(self.pool)))
        newest = self.pool[-front:]
        return [newest[int(self.rng.integers(front))] for _ in range(self.shape.p)]

    def verdicts(self, judged: int) -> int:
        """How many of `judged` children join the pool."""
        s = self.scenario
        acceptance = s.acceptance
        a = acceptance.a0
        if acceptance.tau is not None:
            made = self.proposals
            if acceptance.decay_until is not None:
                made = min(made, acceptance.decay_until)
            a = acceptance.a0 * math.exp(-made / acceptance.tau)
        if self.shape.k > 1:  # a batched step: its own acceptance, capped at certainty
            a = min(1.0, a * acceptance.batched)
        rho = acceptance.correlation
        if rho > 0 and 0 < a < 1:
            a = self.rng.beta(a * (1 / rho - 1), (1 - a) * (1 / rho - 1))
        self.proposals += judged
        passing = int((self.rng.random(judged) < a).sum())
        limit = s.selection.limit
        selected = passing if limit is None else min(passing, limit)
        copies = int((self.rng.random(max(0, selected - 1)) < s.duplicate_children).sum())
        return selected - copies

    def judged(self, tasks: list[tuple[int, tuple[int, ...]]], sums: dict) -> list[Child]:
        """Under the quality model: each task's child proposed and judged on its minibatch;
        those that join the pool, in order."""
        s, candidates = self.scenario, self.candidates
        self.proposals += len(tasks)
        passing = []
        for parent, ids in tasks:
            child = candidates.propose(parent)
            gain = float(candidates.score_child(child, ids).sum()) - sums[parent, ids]
            if gain > 0:
                passing.append((gain, child))
        limit = s.selection.limit
        if limit is not None and len(passing) > limit:
            passing = sorted(passing, key=lambda pair: -pair[0])[:limit]  # stable: ties in order
        kept = passing[:1] + [p for p in passing[1:] if self.rng.random() >= s.duplicate_children]
        return [child for _, child in kept]

    def run(self) -> Generator[simpy.Event, None, None]:
        s, shape, candidates = self.scenario, self.shape, self.candidates
        if candidates is not None:
            candidates.validate(0)
        yield from self.evaluate("seed_val", 1, s.valset_size)  # before iteration 0
        while self.metric_calls < s.budget:  # checked only at the top of an iteration
            step = self.iterations  # gepa's state.i during this iteration
            self.iterations += 1
            tasks = []
            for parent in self.parents():
                for _ in range(shape.n):
                    tasks.append((parent, self.minibatch(step, len(tasks))))
            distinct = list(dict.fromkeys(tasks))
            yield from self.evaluate("parent_minibatch", len(distinct), s.minibatch)
            if candidates is None:
                perfect = {pair for pair in distinct if self.rng.random() < s.skip_perfect}
            else:
                scores = {pair: candidates.evaluate(*pair) for pair in distinct}
                sums = {pair: float(row.sum()) for pair, row in scores.items()}
                perfect = {pair for pair, row in scores.items() if row.min() >= 1}
            tasks = [task for task in tasks if task not in perfect]
            if not tasks:
                continue
            yield from self.reflect([parent for parent, _ in tasks])
            yield from self.evaluate("child_minibatch", len(tasks), s.minibatch)
            if candidates is None:
                new = self.verdicts(len(tasks))
            else:
                children = self.judged(tasks, sums)
                for child in children:
                    candidates.join(child)
                new = len(children)
            if new:
                yield from self.evaluate("full_val", new, s.valset_size)
                self.full_val_iterations += 1
                self.accepted += new
                self.pool += range(len(self.pool), len(self.pool) + new)


def oracle_once(scenario: Scenario, shape: Shape, rng: np.random.Generator) -> OracleResult:
    run = OracleRun(scenario, shape, rng)
    run.env.process(run.run())
    run.env.run()
    best, test = (None, None) if run.candidates is None else run.candidates.result()
    return OracleResult(
        best_score=best,
        test_score=test,
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
