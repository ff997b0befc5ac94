"""What a real run is asked to do, validated before anything heavy is imported.

Kept apart from run.py so bad flags fail at once: importing litellm takes
seconds (docs/runner.md), and a typo should not wait for it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gepa.strategies.proposal_selection import (
    AllImprovements,
    BestImprovement,
    TopKImprovements,
)

from pxn.budget import Budget
from pxn.errors import PxnError
from pxn.runner.tasks import Task, load_task
from pxn.selection import Selection
from pxn.shape import Shape


@dataclass
class RunConfig:
    out: str
    task: str | None = None
    shape: str = "1x1"
    budget: int | str = 40  # metric calls, or dspy.GEPA's auto:LEVEL or full-evals:N
    workers: int = 2
    selection: str = "all"  # all | best | topk:K
    minibatch: int | None = None  # b, gepa's reflection_minibatch_size; None = the task's own
    task_lm: str | None = None  # any litellm model string; None = the local pool
    reflection_lm: str | None = None
    api_base: str | None = None  # for self-hosted OpenAI-style endpoints
    reflection_concurrency: int | None = None  # default P*N
    seed: int = 0
    servers: int = 2  # local pool size
    max_reflection_failures: int | None = None  # default max(5, 2*P*N)
    max_attempts: int = 4  # per LM call, retries included
    timeout: float = 120.0  # seconds per LM attempt
    progress: bool = True
    eval_backend: str = "local"  # local (W threads) | ray (W Ray workers, ray_pool.py)
    ray_address: str | None = None  # HOST:PORT of a Ray head; None = a private local Ray
    merge: bool = False  # gepa's use_merge
    max_merges: int = 5  # gepa's max_merge_invocations: the most merges it accepts
    api: str = "gepa.optimize"  # gepa's entry point: gepa.optimize or optimize_anything


@dataclass(frozen=True)
class Plan:
    """The validated inputs."""

    p: int
    n: int
    task: Task
    reflection_concurrency: int
    max_failures: int
    budget: int  # B in metric calls
    budget_from: str | None = None  # the DSPy budget B was worked out from ("auto:light")


def make_selection(spec: str) -> Any:
    """gepa's selection strategy object for all, best or topk:K."""
    selection = Selection.parse(spec)
    if selection.kind == "all":
        return AllImprovements()
    if selection.kind == "best":
        return BestImprovement()
    return TopKImprovements(selection.k)


def plan(config: RunConfig) -> Plan:
    shape = Shape.parse(config.shape)
    p, n = shape.p, shape.n
    if config.workers < 1:
        raise PxnError(f"must be at least 1, got {config.workers}", subject="workers")
    make_selection(config.selection)
    # None is the default, P*N; a 0 given is a mistake, not a request for it.
    conc = p * n if config.reflection_concurrency is None else config.reflection_concurrency
    if conc < 1:
        raise PxnError(f"must be at least 1, got {conc}", subject="reflection concurrency")
    if config.seed < 0:
        raise PxnError(f"must be a whole number >= 0, got {config.seed}", subject="seed")
    if config.servers < 1:
        raise PxnError(f"must be at least 1, got {config.servers}", subject="LM servers")
    if config.max_merges < 1:
        raise PxnError(f"must be at least 1, got {config.max_merges}", subject="max merges")
    check_eval_backend(config)
    if config.api not in ("gepa.optimize", "optimize_anything"):  # gepa's entry points
        raise PxnError(f"is gepa.optimize or optimize_anything, got {config.api!r}", subject="api")
    if config.api == "optimize_anything" and config.eval_backend != "local":
        raise PxnError(
            "optimize_anything runs the evaluator on gepa's own threads, not on Ray: drop the "
            "ray backend, or run gepa.optimize",
            subject="api",
        )
    task = load_task(config.task)
    if config.minibatch is not None:
        if not 1 <= config.minibatch <= len(task.train):
            raise PxnError(
                f"must be between 1 and the trainset's {len(task.train)} examples, "
                f"got {config.minibatch}",
                subject="minibatch",
            )
        task = replace(task, minibatch=config.minibatch)
    asked = Budget.parse(config.budget)
    # A DSPy budget for the task's program: its components are DSPy's predictors.
    budget = asked.resolve(
        predictors=len(task.seed_candidate),
        valset_size=len(task.val),
        trainset_size=len(task.train),
    )
    if budget <= len(task.val):  # gepa would stop before its first proposal
        calls = f" ({budget} metric calls)" if asked.from_dspy else ""
        short = "below" if budget < len(task.val) else "just"
        raise PxnError(
            f"{asked.label}{calls} is {short} one seed validation ({len(task.val)} metric "
            f"calls on task {task.name!r}); give at least {len(task.val) + 2 * task.minibatch}",
            subject="budget",
        )
    failures = config.max_reflection_failures or max(5, 2 * p * n)
    return Plan(p, n, task, conc, failures, budget, asked.label if asked.from_dspy else None)


def check_eval_backend(config: RunConfig) -> None:
    """The evaluation backend and Ray address, checked without importing Ray (slow to import);
    a head that does not answer is named here, before the LM pool starts."""
    from pxn.ray_cluster import RAY_MISSING, Address

    if config.eval_backend not in ("local", "ray"):
        raise PxnError(f"is local or ray, got {config.eval_backend!r}", subject="eval backend")
    if config.eval_backend == "local":
        if config.ray_address is not None:
            raise PxnError("is for the ray backend; drop it, or ask for that backend",
                           subject="ray address")  # fmt: skip
        return
    if importlib.util.find_spec("ray") is None:
        raise PxnError(RAY_MISSING, subject="eval backend")
    if config.ray_address is not None:
        address = Address.parse(config.ray_address)
        address.check_reachable()  # a TCP connect: seconds sooner than ray.init says it


def check_out(config: RunConfig, resume: bool) -> None:
    out = Path(config.out)
    if not resume and (out / "trace.jsonl").exists():
        raise PxnError(f"{out} already holds a run: resume it, or choose a new directory",
                       subject="run directory")  # fmt: skip
