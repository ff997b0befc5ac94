"""The SimPy model of one batched gepa 0.1.4 run on a finite worker pool.

`gepa_run` is the process: it reads like `GEPAEngine.run` with `PxNSampling`,
one stage after another with a barrier between each, and gepa's choices
(parents, minibatches, skips, verdicts) in gepa_rules.py. A stage of calls
is one pipeline for rollouts and reflections alike (stage.py), a few SimPy
events per stage instead of one process per rollout.

gepa counts a metric call per example evaluated: the seed's validation, the
distinct (parent, minibatch) pairs of the parent stage, every child's
minibatch, a merge's subsample and every new candidate's validation.
Reflections count nothing. gepa checks the budget only at the top of an
iteration, so the last one overshoots it.

Nothing before that check depends on the budget, so a run to budget B holds
the run to any smaller budget c as its prefix, ending at the first iteration
top where the metric calls reach c. A run told smaller budgets
(`budgets_to_note`) keeps its summary at each of those checks (`prefixes`):
one replicate answers every budget, to the bit (tests/test_sim_prefixes.py).

With gepa's merge (use_merge), an iteration may begin with a merge
(merge.py says when and of which candidates): its subsample is one stage of
rollouts on the validation set, and an accepted merge's full validation
another; the merged program needs no reflection. A merge found takes the
iteration: it makes no proposal.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import simpy

from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.accounting import Accountant
from pxn.sim.gepa_rules import GepaChoices, MergeTask, ProposalTask
from pxn.sim.latency import CallLatency, CandidateLengths
from pxn.sim.merge import SUBSAMPLE
from pxn.sim.stage import CallStage
from pxn.sim.tracing import VALSET, NoTrace, SimTrace
from pxn.trace import ROLLOUT_PHASES, STAGES, TraceWriter

# The search's stream is a child of the replicate's, keyed apart from those spawned
# by number (the tokens' is the first spawned); the lost proposals' and the candidates'
# prompt lengths likewise.
SEARCH_STREAM = 1 << 16
FAILURES_STREAM = 1 << 17
PROMPTS_STREAM = 1 << 18


def replicate_rng(seed: int, replicate: int, *stream: int) -> np.random.Generator:
    """Replicate r's own stream, the same whatever process or machine runs it; with a
    `stream`, its own for one kind of draw (SEARCH_STREAM: the quality model's examples,
    qualities and scores; FAILURES_STREAM: the proposals it loses; PROMPTS_STREAM: its
    proposals' prompt lengths)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(replicate, *stream)))


class SimulatedRun:
    """One simulated run: its stages, gepa's choices, and what gepa counts."""

    def __init__(
        self,
        scenario: Scenario,
        shape: Shape,
        rng: np.random.Generator,
        trace: NoTrace,
        search: np.random.Generator | None = None,
        failures: np.random.Generator | None = None,
        budgets_to_note: Sequence[int] = (),
        prompts: np.random.Generator | None = None,
    ):
        """`budgets_to_note`: smaller budgets whose runs' summaries to keep (`prefixes`)."""
        self.env = env = simpy.Environment()
        self.scenario = scenario
        self.trace = trace
        self.choices = GepaChoices(scenario, shape, rng, search, failures)
        trace.sampler = self.choices.sampler
        self.accountant = Accountant(scenario, rng)
        loads = scenario.loads
        # This run's conditions: one draw for both models (drawn only when they vary by run,
        # so a scenario without the effect keeps its streams).
        conditions = float(rng.standard_normal()) if loads.varies_by_run else 0.0
        rollout_latency = CallLatency(
            {phase: scenario.rollout_latency(phase) for phase in ROLLOUT_PHASES},
            rng,
            loads.task,
            loads.task.slots(scenario.workers),
            run_factor=loads.task.run_factor(conditions),
        )
        reflection_latency = CallLatency(
            {"reflection": scenario.reflection},
            rng,
            loads.reflection,
            loads.reflection.slots(scenario.reflection_concurrency),
            # A reflection at this b reads more (or less) than at the measured b.
            shift=0.0
            if scenario.tokens is None
            else scenario.tokens.reflection_latency_shift(scenario.minibatch),
            run_factor=loads.reflection.run_factor(conditions),
        )
        overhead = scenario.stage_overhead
        split = scenario.workers if scenario.worker_split == "per_candidate" else None
        # Each candidate's prompt length, where it scales its rollouts (scenario.prompt).
        self.lengths = None if prompts is None else CandidateLengths(scenario.prompt, prompts)
        self.rollouts = CallStage(
            env, "task", rollout_latency, overhead, self.accountant.task, trace, split, self.lengths
        )
        self.reflections = CallStage(
            env, "reflection", reflection_latency, overhead, self.accountant.reflection, trace
        )
        self.metric_calls = 0
        self.iterations = 0
        self.full_val_iterations = 0
        self.accepted = 0
        self.skipped = 0
        self.failed = 0
        self.no_proposal_iterations = 0
        self.merges = 0
        self.merges_accepted = 0
        self.progress: list[tuple[float, float]] = []  # (time, best validation score) as it rose
        # Budgets below this run's whose summaries are still to be kept, the largest first.
        self.pending = sorted((b for b in budgets_to_note if b < scenario.budget), reverse=True)
        self.prefixes: dict[int, RunSummary] = {}  # budget -> the summary a run given it ends with

    def budget_left(self) -> bool:
        """gepa's check at the top of an iteration: whether any budget is left. A run given
        a smaller budget that is now spent would end here: its summary is kept."""
        calls, pending = self.metric_calls, self.pending
        while pending and calls >= pending[-1]:
            self.prefixes[pending.pop()] = self.summary()
        return calls < self.scenario.budget

    def validated(self, iteration: int, candidates: list[str], scores: list[float] | None) -> None:
        """New candidates' full validations ended: counted, traced and, scored, the best
        validation score noted when it rose (the quality model)."""
        v = self.scenario.valset_size
        self.metric_calls += len(candidates) * v
        if scores is None:
            return
        self.trace.validations(iteration, self.env.now, candidates, scores, v)
        best = self.choices.search.best_score
        if not self.progress or best > self.progress[-1][1]:
            self.progress.append((self.env.now, best))

    def summary(self) -> RunSummary:
        wall_clock = self.env.now
        stage_time = dict.fromkeys(STAGES, 0.0) | self.rollouts.time | self.reflections.time
        # Counted, not the wall clock less the stages: that leaves float rounding (-3e-13 s).
        stage_time["overhead"] = self.rollouts.overhead_time + self.reflections.overhead_time
        workers = self.scenario.workers
        return RunSummary(
            wall_clock=wall_clock,
            iterations=self.iterations,
            full_val_iterations=self.full_val_iterations,
            proposals=self.choices.proposals,
            accepted=self.accepted,
            metric_calls=self.metric_calls,
            stage_time=stage_time,
            utilisation=self.rollouts.busy / (workers * wall_clock) if wall_clock > 0 else 0.0,
            dollars=self.accountant.dollars(),
            throttled_calls=self.accountant.throttled_calls,
            skipped=self.skipped,
            failed=self.failed,
            no_proposal_iterations=self.no_proposal_iterations,
            merges=self.merges,
            merges_accepted=self.merges_accepted,
            **(self.search_outcome() if self.progress else {}),
        )

    def search_outcome(self) -> dict[str, Any]:
        """The summary's fields of the search, under the quality model."""
        search = self.choices.search
        return {
            "seed_score": search.seed_score,
            "best_score": self.progress[-1][1],
            "test_score": search.test_score,
            "progress": tuple(self.progress),
            "figures": search.figures(),
        }


def gepa_run(run: SimulatedRun) -> Generator[simpy.Event, None, None]:
    """One gepa.optimize(..., sampling_strategy=PxNSampling(P, N)) run."""
    scenario, choices, trace, env = run.scenario, run.choices, run.trace, run.env
    b, v = scenario.minibatch, scenario.valset_size
    search = choices.search
    scores = search.seed_validation()
    yield run.rollouts.run(0, "seed_val", [("0", VALSET)], v, scores)
    run.validated(0, ["0"], scores)
    while run.budget_left():  # checked only here: the last iteration overshoots
        run.iterations += 1
        iteration, started = run.iterations, env.now
        merge = choices.merge_now()
        if merge is not None:  # the merge takes the iteration
            yield from merge_step(run, iteration, merge)
            trace.iteration(iteration, started, env.now)
            continue
        tasks = choices.sample_tasks(iteration)
        # Each distinct (parent, minibatch) is evaluated once, and counted once.
        pairs = list(dict.fromkeys([(task.parent, task.chunk) for task in tasks]))
        scores = search.evaluate_parents(iteration, pairs)
        yield run.rollouts.run(iteration, "parent_minibatch", pairs, b, scores)
        run.metric_calls += len(pairs) * b
        proposing = choices.skip_perfect_parents(tasks, pairs)
        run.skipped += len(tasks) - len(proposing)
        kept = {id(task) for task in proposing}
        skipped = [task for task in tasks if id(task) not in kept]
        trace.no_proposals(iteration, env.now, skipped, "perfect_parent")
        tasks, lost = choices.lose_before_reflection(proposing)
        trace.no_proposals(iteration, env.now, lost, "reflective_dataset")
        run.failed += len(lost)
        if tasks:
            tasks = yield from reflect(run, iteration, tasks)
        if tasks:
            children = [(task.proposal, task.chunk) for task in tasks]
            scores = search.evaluate_children(iteration, tasks)
            yield run.rollouts.run(iteration, "child_minibatch", children, b, scores)
            run.metric_calls += len(tasks) * b
            joined = choices.judge(tasks)
            new = [str(choices.candidates + i) for i in range(len(joined))]  # pool ids, in order
            trace.decisions(iteration, env.now, tasks, joined, new)
            if joined:
                if run.lengths is not None:
                    run.lengths.joined([task.proposal for task in joined], new)
                scores = choices.join(tasks, joined)
                yield run.rollouts.run(iteration, "full_val", [(c, VALSET) for c in new], v, scores)
                run.accepted += len(new)
                run.full_val_iterations += 1
                run.validated(iteration, new, scores)
                choices.note_lineage(joined)
        else:
            run.no_proposal_iterations += 1
        trace.iteration(iteration, started, env.now)


def reflect(
    run: SimulatedRun, iteration: int, tasks: list[ProposalTask]
) -> Generator[simpy.Event, None, list[ProposalTask]]:
    """The reflection stage: gepa's first pass over the tasks and, when a call of it failed,
    every task again, one at a time (gepa_rules.reflection_passes). The tasks that proposed."""
    passes = run.choices.reflect(tasks)
    both = [(passes.first, passes.first_failed, False), (passes.retried, passes.retry_failed, True)]
    for calls, failed, one_at_a_time in both:
        if calls:  # the second pass runs only when a call of the first failed
            items = [(task.proposal, task.parent) for task in calls]
            yield run.reflections.run(
                iteration, "reflection", items, errors=failed, one_at_a_time=one_at_a_time
            )
    run.failed += len(passes.lost)
    run.trace.no_proposals(iteration, run.env.now, passes.lost, "reflection_failed")
    return passes.proposing


def merge_step(
    run: SimulatedRun, iteration: int, merge: MergeTask
) -> Generator[simpy.Event, None, None]:
    """A merge gepa found: its subsample, gepa's verdict and, accepted, its full validation."""
    choices = run.choices
    name = f"{iteration}-merge"
    scores = choices.search.evaluate_merge(merge)
    subsample = [(name, merge.examples)]
    yield run.rollouts.run(iteration, "merge_subsample", subsample, SUBSAMPLE, scores)
    run.metric_calls += SUBSAMPLE
    run.merges += 1
    accepted = choices.judge_merge(merge)
    new = str(choices.candidates) if accepted else None
    run.trace.merge(iteration, run.env.now, merge, name, new)
    if new is None:
        return
    if run.lengths is not None:
        run.lengths.joined([name], [new])
    scores = choices.join_merge(merge)
    yield run.rollouts.run(iteration, "full_val", [(new, VALSET)], run.scenario.valset_size, scores)
    run.merges_accepted += 1
    run.full_val_iterations += 1
    run.validated(iteration, [new], scores)


def replicate_run(
    scenario: Scenario,
    shape: Shape,
    replicate: int,
    trace: NoTrace,
    budgets_to_note: Sequence[int] = (),
) -> SimulatedRun:
    """Replicate r's run, not yet started: `scenario` is the one it runs (its draw
    applied, scenario.for_replicate), its random streams its own."""
    seed = scenario.seed
    search = None if scenario.quality is None else replicate_rng(seed, replicate, SEARCH_STREAM)
    failures = replicate_rng(seed, replicate, FAILURES_STREAM) if scenario.failures.any else None
    prompts = None if scenario.prompt is None else replicate_rng(seed, replicate, PROMPTS_STREAM)
    rng = replicate_rng(seed, replicate)
    return SimulatedRun(scenario, shape, rng, trace, search, failures, budgets_to_note, prompts)


def simulate_once(
    scenario: Scenario, shape: Shape, replicate: int, trace: TraceWriter | None = None
) -> RunSummary:
    """Simulate one replicate; write its trace too when a writer is given.

    With parameter uncertainty, replicate r runs the scenario's draw r mod D.
    """
    scenario = scenario.for_replicate(replicate)
    tracer = NoTrace() if trace is None else SimTrace(trace, scenario)
    run = replicate_run(scenario, shape, replicate, tracer)
    tracer.run_start(scenario, shape, replicate)
    run.env.process(gepa_run(run))
    run.env.run()
    tracer.run_end(run.env.now, run.metric_calls, run.iterations)
    return run.summary()


def simulate_budgets(
    scenario: Scenario, shape: Shape, replicate: int, budgets: Sequence[int]
) -> tuple[RunSummary, ...]:
    """Replicate r's summary at each of `budgets` (in their order), from one run to the
    scenario's budget, the largest of them: each smaller one is a prefix of that run.

    The summaries are those `simulate_once` gives at each budget, to the bit.
    """
    if max(budgets) != scenario.budget:
        raise ValueError(f"the run goes to the largest budget: {max(budgets)} != {scenario.budget}")
    run = replicate_run(scenario.for_replicate(replicate), shape, replicate, NoTrace(), budgets)
    run.env.process(gepa_run(run))
    run.env.run()
    final = run.summary()
    return tuple(run.prefixes.get(budget, final) for budget in budgets)
