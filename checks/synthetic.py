"""Synthetic work of known latency and acceptance for the real gepa engine (`pxn conformance`).

gepa and the runner run unchanged; only the two language models are synthetic
(docs/validation.md). A `SyntheticWork` is the task and the reflection model writing its
children: here levels realising [acceptance] rates (synthetic_quality.py: a [quality] model).
The real runs on it are here too: one at a scenario's setup, and a grid of them (every
shape at every W, a few times each), with what their models slept.

What the models realise of a scenario, in its seconds:
- a rollout sleeps a draw of `scenario.rollout_latency(phase)`, a reflection
  one of `scenario.reflection` (caps and cap_retries as Distribution.sample);
- load per model: at most `servers` calls at once, and a call served while m
  calls are sleeps 1 + slowdown (m - 1) times its draw. As calibration reads a
  trace, m is the most calls served over the call's first DISPATCH_WINDOW: a
  stage's calls reach the model microseconds apart yet count each other;
- each run draws one z, and every call sleeps Load.run_factor(z) times more;
- acceptance: a level-L candidate scores L / (L + 1) on every example (never
  perfect). A reflection writes its child at L + 1 with the iteration's rate
  (`acceptance.step_rate`), else at L, so gepa's strict minibatch rule accepts
  exactly the children a level up. A tag keeps siblings distinct texts.
Not used: tokens and prices (nothing is paid), stage_overhead (gepa's own work is
measured) and parameter uncertainty (the scenario's values are the truth).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.load import Load
from pxn.rate_limits import RateLimits
from pxn.runner.config import Plan, RunConfig, check_out
from pxn.runner.lm import CallSite, LMReply
from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.retry import FailedAttempt
from pxn.runner.run import RunResult, run_engine, sigterm_as_interrupt
from pxn.runner.tasks import Feedback, LMCall, Task
from pxn.scenario import Scenario
from pxn.shape import Shape

COMPONENT = "instructions"
DISPATCH_WINDOW = 0.005  # seconds; a stage's threads take their calls well within it
LEVEL = re.compile(r"\[\[level (\d+)\]\]")
# The reflection prompt: the parent's text first, so its level is the first one found.
PROMPT = "```\n<curr_param>\n```\n<side_info>"


def level_of(text: str) -> int:
    found = LEVEL.search(text)
    if found is None:
        raise ValueError(f"no [[level N]] in {text[:80]!r}")
    return int(found.group(1))


def candidate_text(level: int, tag: str) -> str:
    return f"[[level {level}]] {tag}"


def score_of(level: int) -> float:
    """Strictly increasing in the level, and below gepa's perfect 1.0."""
    return level / (level + 1)


def check_realisable(scenario: Scenario) -> None:
    """Refuse what synthetic work cannot realise, naming the scenario's key."""
    if scenario.rate_limits != RateLimits():
        raise PxnError(
            "provider rate limits are not realised by synthetic work; drop them to check the rest",
            subject="[rate_limits]",
        )
    if scenario.loads.reflection.prefix_seconds:
        raise PxnError(
            "a prompt-prefix cache is not realised by synthetic work (its servers keep no "
            "prompt); set it to 0 to check the rest",
            subject="load.reflection.prefix_seconds",
        )
    if scenario.merges:
        raise PxnError(
            "is not realised by synthetic work (its candidates are one text, which gepa never "
            "merges); set components = 1 or merge = false to check the rest",
            subject="components",
        )
    for key in ("skip_perfect", "duplicate_children"):
        if getattr(scenario, key):
            raise PxnError(
                "is not realised by synthetic work (its levels never score perfectly and its "
                "children are never one text); set it to 0 to check the rest",
                subject=key,
            )


class LatencyDraws:
    """Latencies of one distribution, drawn in blocks (a scipy call per call would be timed)."""

    BLOCK = 1024

    def __init__(self, distribution: Distribution, rng: np.random.Generator):
        self.distribution = distribution
        self.rng = rng
        self.block: Iterator[float] = iter(())

    def next(self) -> float:
        value = next(self.block, None)
        if value is None:
            self.block = iter(self.distribution.sample(self.rng, self.BLOCK).tolist())
            value = next(self.block)
        return value


@dataclass
class Served:
    """A call being served: when it started, and the most calls served since (itself in)."""

    start: float
    peak: int


class SleepingModel:
    """A model that only takes time: the scenario's task or reflection model (`role`), its
    latency and load. As the task LM it answers "ok"; a reflection model (a subclass) writes
    children. Thread-safe: the W rollout threads (or C reflection threads) call it at once."""

    role = "task"

    def __init__(self, scenario: Scenario, rng: np.random.Generator, conditions: float = 0.0):
        """`conditions`: the run's standard normal z, for the model's run_spread."""
        self.scenario = scenario
        self.model = f"synthetic-{self.role}"
        self.load: Load = getattr(scenario.loads, self.role)
        self.run_factor = self.load.run_factor(conditions)
        self.rng = rng
        self._lock = threading.Lock()
        servers = self.load.servers
        self._servers = threading.BoundedSemaphore(servers) if servers else None
        self._served: list[Served] = []  # calls being served now
        self._draws: dict[str, LatencyDraws] = {}
        self.calls = 0
        self.drawn = 0.0  # seconds the calls were meant to take, load included
        self.slept = 0.0  # seconds they took
        self._late = 0.0  # seconds the OS woke the sleeping threads late, in all

    @property
    def label(self) -> str:
        return f"{self.model} (synthetic)"

    def latency(self, site: CallSite) -> Distribution:
        if self.role == "task":
            return self.scenario.rollout_latency(site.phase)
        return self.scenario.reflection

    def reply(self, messages: list[dict[str, Any]], site: CallSite) -> str:
        return "ok"

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        clock: Callable[[], float],
        on_failure: Callable[[FailedAttempt], None],
        site: CallSite | None = None,
        **kwargs: Any,
    ) -> tuple[LMReply, int]:
        if site is None:
            raise ValueError("a synthetic model draws its latency by the call's site")
        text = self.reply(messages, site)  # decided as the call starts: it takes no time
        if self._servers is not None:
            self._servers.acquire()  # waits for a server, as a call queued at a local pool
        try:
            self._sleep(site)
        finally:
            if self._servers is not None:
                self._servers.release()
        return LMReply(text, None, None, None), 1

    def _sleep(self, site: CallSite) -> None:
        start = time.perf_counter()
        with self._lock:
            me = Served(start, len(self._served) + 1)
            self._served.append(me)
            for other in self._served:  # those in their first moments count this call
                if start - other.start <= DISPATCH_WINDOW:
                    other.peak = max(other.peak, len(self._served))
            if site.phase not in self._draws:
                self._draws[site.phase] = LatencyDraws(self.latency(site), self.rng)
            draw = self._draws[site.phase].next()
            # A sleeping thread wakes late (docs/validation.md): asking for the time
            # less the mean lateness so far makes calls take their time on average.
            lateness = self._late / max(self.calls, 1)
        if self.load.slowdown:  # the call's load is known once its first moments are over
            time.sleep(min(DISPATCH_WINDOW, draw))
        with self._lock:
            seconds = draw * self.run_factor * self.load.factor(me.peak)
        woken = time.perf_counter()
        rest = max(0.0, seconds - (woken - start) - lateness)
        time.sleep(rest)
        end = time.perf_counter()
        with self._lock:
            self._served.remove(me)
            self.calls += 1
            self.drawn += seconds
            self.slept += end - start
            self._late += end - woken - rest


class SyntheticReflectionModel(SleepingModel):
    """The reflection LM: sleeps a reflection's latency and writes the child a level up
    with the iteration's acceptance rate, else at its parent's level."""

    role = "reflection"

    def __init__(self, scenario: Scenario, rng: np.random.Generator, conditions: float = 0.0):
        super().__init__(scenario, rng, conditions)
        # Verdicts on a stream of their own: the C threads' latency draws then never
        # interleave with them, so a replicate's verdicts are the same on every rerun.
        self.verdicts = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
        self._step: int | None = None
        self._rate = 0.0
        self._proposals = 0  # reflections asked for so far
        self.levels_up = 0  # children written a level up: the ones gepa must accept
        self.step_rates: list[float] = []  # each iteration's acceptance rate, in order

    def reply(self, messages: list[dict[str, Any]], site: CallSite) -> str:
        parent = level_of(prompt_text(messages))
        with self._lock:
            if site.iteration != self._step:
                # The iteration's first reflection: the ones asked for so far are the
                # proposals made before the iteration (gepa's barrier ended them all).
                self._step = site.iteration
                made = self._proposals
                self._rate = float(self.scenario.acceptance.step_rate(self.verdicts, made))
                self.step_rates.append(self._rate)
            up = self.verdicts.random() < self._rate
            tag = f"proposal {site.iteration}-{self._proposals}"
            self._proposals += 1
            self.levels_up += up
        return f"```\n{candidate_text(parent + up, tag)}\n```"


def record(example: Any, output: str, fb: Feedback) -> dict[str, str]:
    """What the reflection LM reads of a synthetic example: no output, only the score."""
    return {"Input": str(example), "Feedback": fb.feedback}


def synthetic_task(scenario: Scenario) -> Task:
    """A task of the scenario's sizes whose candidates are levels (see the module's doc)."""

    def program(candidate: dict[str, str], example: Any, lm: LMCall) -> str:
        lm([{"role": "user", "content": f"Answer {example}."}])
        return str(level_of(candidate[COMPONENT]))

    def metric(example: Any, output: str) -> Feedback:
        score = score_of(int(output))
        return Feedback(score, f"scored {score:.4f}")

    return Task(
        name="synthetic",
        description="candidates are levels; models sleep the scenario's latencies",
        train=[f"train example {i}" for i in range(scenario.trainset_size)],
        val=[f"val example {i}" for i in range(scenario.valset_size)],
        seed_candidate={COMPONENT: candidate_text(0, "seed")},
        program=program,
        metric=metric,
        record=record,
        reflection_prompt_template=PROMPT,
        minibatch=scenario.minibatch,
    )


@dataclass(frozen=True)
class SearchOutcome:
    """What the synthetic search knows of a finished run that gepa's result does not say."""

    levels_up: int | None = None  # levels: children written a level up, which gepa must accept
    test_score: float | None = None  # quality: the chosen candidate's expected score


@dataclass
class SyntheticWork:
    """A run's synthetic search: the task gepa optimises, the reflection model that writes
    its children, and what the search knows of the run once it ends."""

    task: Task
    reflection: SleepingModel
    outcome: Callable[[RunResult], SearchOutcome]


def levels_work(
    scenario: Scenario, rng: np.random.Generator, conditions: float, seed: np.random.SeedSequence
) -> SyntheticWork:
    """The synthetic search of a scenario with [acceptance] rates (`seed` is not needed: the
    verdicts draw from a stream of the reflection model's own)."""
    if scenario.acceptance is None:
        raise PxnError("the levels task realises [acceptance] rates; this scenario has a "
                       "[quality] table: run it on the quality task", subject="task")  # fmt: skip
    model = SyntheticReflectionModel(scenario, rng, conditions)
    return SyntheticWork(synthetic_task(scenario), model, lambda _: SearchOutcome(model.levels_up))


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
