"""gepa's loop in a real run, under its recording: gepa.optimize with pxn's adapter and
reflection LM, or optimize_anything with the task's program and metric as its evaluator;
gepa's own log written to a file, redacted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gepa  # imported before any timing starts (run.py imports this module)
from gepa.core.result import GEPAResult
from gepa.optimize_anything import (
    EngineConfig,
    GEPAConfig,
    MergeConfig,
    ReflectionConfig,
    TrackingConfig,
    optimize_anything,
)
from gepa.strategies.proposal_sampling import PxNSampling
from rich.console import Console
from rich.live import Live
from rich.text import Text

from pxn.runner.adapter import InstrumentedAdapter, Item, RolloutRequest, run_rollout, wrap_split
from pxn.runner.config import Plan, RunConfig, make_selection
from pxn.runner.lm import ChatModel
from pxn.runner.record import Recording
from pxn.runner.redact import redact
from pxn.runner.reflection import InstrumentedReflectionLM
from pxn.runner.tasks import Task


def run_gepa_optimize(
    config: RunConfig,
    pl: Plan,
    rec: Recording,
    adapter: InstrumentedAdapter,
    reflection: InstrumentedReflectionLM,
) -> GEPAResult:
    """gepa.optimize on the task, with pxn's adapter and reflection LM, recorded."""
    task = pl.task
    gepa_dir = rec.out / "gepa"
    kwargs = rec.wrap(
        seed_candidate=dict(task.seed_candidate),
        trainset=wrap_split("train", task.train),
        valset=wrap_split("val", task.val),
        adapter=adapter,
        reflection_lm=reflection,
        reflection_prompt_template=task.reflection_prompt_template,
        reflection_minibatch_size=task.minibatch,
        sampling_strategy=PxNSampling(pl.p, pl.n),
        selection_strategy=make_selection(config.selection),
        candidate_selection_strategy="pareto",
        max_metric_calls=pl.budget,
        run_dir=str(gepa_dir),
        # gepa 0.1.4 keys its cache by example position, so validation lookups would
        # hit train rollouts: off.
        cache_evaluation=False,
        use_merge=config.merge,
        max_merge_invocations=config.max_merges,
        raise_on_exception=True,
        display_progress_bar=False,
        logger=GepaLog(gepa_dir / "run_log.txt"),
        seed=config.seed,
    )
    with LiveProgress(rec.progress, pl.budget, enabled=config.progress):
        return gepa.optimize(**kwargs)


def run_optimize_anything(
    config: RunConfig,
    pl: Plan,
    rec: Recording,
    evaluator: TaskEvaluator,
    reflection: InstrumentedReflectionLM,
) -> GEPAResult:
    """optimize_anything on the task (generalization: a dataset and a valset), the task's
    program and metric as its evaluator on W of gepa's threads, recorded. gepa's
    optimize_anything defaults stand where pxn run has no flag (its frontier, no skipping
    of perfect parents)."""
    task = pl.task
    gepa_dir = rec.out / "gepa"
    engine = EngineConfig(
        run_dir=str(gepa_dir),
        seed=config.seed,
        max_metric_calls=pl.budget,
        parallel=True,
        max_workers=config.workers,
        sampling_strategy=PxNSampling(pl.p, pl.n),
        selection_strategy=make_selection(config.selection),
        raise_on_exception=True,
        display_progress_bar=False,
        use_cloudpickle=False,  # the state holds texts and scores: plain pickle reads it back
    )
    reflection_config = ReflectionConfig(
        reflection_lm=reflection,
        reflection_minibatch_size=task.minibatch,
        **(
            {"reflection_prompt_template": task.reflection_prompt_template}
            if task.reflection_prompt_template is not None
            else {}
        ),
    )
    kwargs = rec.wrap(
        seed_candidate=dict(task.seed_candidate),
        evaluator=evaluator,
        dataset=wrap_split("train", task.train),
        valset=wrap_split("val", task.val),
        config=GEPAConfig(
            engine=engine,
            reflection=reflection_config,
            tracking=TrackingConfig(logger=GepaLog(gepa_dir / "run_log.txt")),
            merge=MergeConfig(max_merge_invocations=config.max_merges) if config.merge else None,
        ),
    )
    with LiveProgress(rec.progress, pl.budget, enabled=config.progress):
        return optimize_anything(**kwargs)


class TaskEvaluator:
    """A task's program and metric as optimize_anything's evaluator: one rollout of the
    candidate on an example, its score and what the reflection LM sees (the task's record).
    The recording times the call; this tells it the rollout's tokens, cost and tries. A
    rollout whose LM call still fails after its retries scores 0, its error in side_info."""

    def __init__(self, task: Task, lm: ChatModel, rec: Recording):
        self.task = task
        self.lm = lm
        self.rec = rec

    def __call__(self, candidate: dict[str, str], example: Item) -> tuple[float, dict[str, Any]]:
        rec = self.rec
        request = RolloutRequest(candidate, example.payload, rec.phase, rec.iteration)
        outcome = run_rollout(self.task, self.lm, request, rec.clock)
        note = rec.rollout_note()
        if note is not None:
            note.tokens_in, note.tokens_out = outcome.tokens_in, outcome.tokens_out
            note.cost, note.attempts = outcome.cost, outcome.attempts
        side_info: dict[str, Any] = dict(outcome.record)
        if outcome.error is not None:
            side_info["Error"] = outcome.error
        return outcome.score, side_info


class GepaLog:
    """gepa's log, to a file only (its default logger also prints), every line redacted."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def log(self, message: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(redact(str(message)) + "\n")


class LiveProgress:
    """Renders from the recording's progress snapshot; rich refreshes it from its own thread."""

    def __init__(
        self, snapshot: Callable[[], dict[str, Any]], budget: int, *, enabled: bool = True
    ):
        # iteration, accepted, best_val and metric_calls so far (gepa reports none for the
        # seed validation: the rollouts recorded count it).
        self.snapshot = snapshot
        self.budget = budget
        self.enabled = enabled
        self._t0 = time.perf_counter()
        self._live: Live | None = None

    def __rich__(self) -> Text:
        now = self.snapshot()
        used = now["metric_calls"]
        elapsed = time.perf_counter() - self._t0
        eta = elapsed * (self.budget - used) / used if 0 < used < self.budget else 0.0
        best = "-" if now["best_val"] is None else f"{now['best_val']:.3f}"
        return Text(
            f"metric calls {used}/{self.budget}  iteration {now['iteration']}  "
            f"accepted {now['accepted']}  best val {best}  "
            f"elapsed {elapsed:5.1f}s  eta {eta:5.1f}s"
        )

    def __enter__(self) -> LiveProgress:
        console = Console(stderr=True)
        # A live line only makes sense on a terminal; piped output stays clean.
        if self.enabled and console.is_terminal:
            self._live = Live(self, console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
