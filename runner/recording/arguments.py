"""The recording's arguments and gepa.optimize's, checked before anything runs or is written.

A mistake gepa would meet only later (a budget of the wrong type, an empty trainset) or
one that leaves a trace no calibration can use (a budget the seed's validation spends) is
refused as the CLI refuses a bad flag. gepa.optimize needs a stopping condition of the
user's: the recorder adds a stopper of its own, so without one the run would never end.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

from pxn.errors import PxnError
from pxn.fields import whole


def checked_out(out: Any) -> Path:
    """The run directory: a path that is not a file."""
    if not isinstance(out, str | os.PathLike):
        raise PxnError(
            f"must be a path (a str or a pathlib.Path): got {type(out).__name__}",
            subject="run directory",
        )
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise PxnError(
            f"{path} is a file: give a directory for the run (it holds trace.jsonl)",
            subject="run directory",
        )
    return path


def check_options(
    *,
    resume: Any,
    overwrite: Any,
    reports_rollouts: Any = False,
    meta: Any = None,
    **counts: Any,
) -> None:
    """The recording's own options: flags are bools, `counts` (workers, ...) None or whole
    numbers >= 1, meta a dict of JSON values."""
    for name, value in {
        "resume": resume,
        "overwrite": overwrite,
        "reports_rollouts": reports_rollouts,
    }.items():
        if not isinstance(value, bool):
            raise PxnError(f"must be True or False: got {value!r}", subject=name)
    if resume and overwrite:
        raise PxnError("resume and overwrite exclude each other", subject="recording")
    for name, value in counts.items():
        if value is not None:
            whole(value, name)
    if meta is None:
        return
    if not isinstance(meta, dict) or not all(isinstance(key, str) for key in meta):
        raise PxnError(f"must be a dict with str keys: got {meta!r}", subject="meta")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PxnError(
            f"must hold JSON values only (it goes into the trace): {exc}", subject="meta"
        ) from None


def check_gepa_arguments(kwargs: dict[str, Any]) -> None:
    """gepa.optimize's keyword arguments, as far as the recording and a usable trace need."""
    adapter = kwargs.get("adapter")
    _check_default_adapter(kwargs)
    seed = kwargs.get("seed_candidate")
    if not isinstance(seed, dict) or not seed:
        raise PxnError(
            f"must be a dict of component name -> text, at least one: got {seed!r}",
            subject="seed_candidate",
        )
    train = _examples(kwargs.get("trainset"), "trainset")
    valset = kwargs.get("valset")
    val = train if valset is None else _examples(valset, "valset")
    # gepa's default adapter (adapter None) has no propose_new_texts of its own.
    if kwargs.get("reflection_lm") is None and getattr(adapter, "propose_new_texts", None) is None:
        raise PxnError(
            "is needed: a model name, a callable or an object with batch_complete (or an "
            "adapter with its own propose_new_texts)",
            subject="reflection_lm",
        )
    _check_budget(kwargs, val)
    minibatch = kwargs.get("reflection_minibatch_size")
    if minibatch is not None:
        whole(minibatch, "reflection_minibatch_size")
    check_callbacks(kwargs.get("callbacks"), "callbacks")


def check_callbacks(callbacks: Any, name: str) -> None:
    if callbacks is not None and not isinstance(callbacks, list | tuple):
        raise PxnError(
            f"must be a list of callback objects: got {type(callbacks).__name__}", subject=name
        )


def _check_default_adapter(kwargs: dict[str, Any]) -> None:
    """An adapter, or a task_lm for gepa's default adapter: one of the two, as gepa asserts."""
    adapter, task_lm = kwargs.get("adapter"), kwargs.get("task_lm")
    if adapter is None and task_lm is None:
        raise PxnError(
            "is needed: pass your GEPAAdapter, or task_lm (a model name such as "
            "'openai/gpt-4.1-mini') for gepa's default adapter",
            subject="adapter",
        )
    if adapter is None:
        if not (isinstance(task_lm, str) and task_lm) and not callable(task_lm):
            raise PxnError(
                f"must be a model name (a str) or a callable: got {type(task_lm).__name__}",
                subject="task_lm",
            )
        return
    for name in ("task_lm", "evaluator"):
        if kwargs.get(name) is not None:
            raise PxnError(
                "is for gepa's default adapter, which gepa builds only without an adapter: "
                f"drop {name}, or the adapter",
                subject=name,
            )


def _examples(data: Any, name: str) -> int:
    """How many examples `data` holds: a list (or a gepa DataLoader) of at least one."""
    if data is None:
        raise PxnError("is needed: the examples, a list", subject=name)
    if isinstance(data, str | bytes) or not hasattr(data, "__len__"):
        raise PxnError(
            f"must be a list of examples (or a gepa DataLoader): got {type(data).__name__}",
            subject=name,
        )
    if len(data) == 0:
        raise PxnError("is empty: give at least one example", subject=name)
    return len(data)


def _check_budget(kwargs: dict[str, Any], valset_size: int) -> None:
    budget = kwargs.get("max_metric_calls")
    if budget is None:
        if kwargs.get("max_reflection_cost") is None and not kwargs.get("stop_callbacks"):
            raise PxnError(
                "is needed (or max_reflection_cost, or stop_callbacks of your own): gepa "
                "needs a stopping condition",
                subject="max_metric_calls",
            )
        return
    check_budget_after_seed(budget, valset_size, "max_metric_calls")


def check_budget_after_seed(budget: Any, valset_size: int, name: str) -> None:
    """A whole budget that leaves metric calls after the seed's validation."""
    whole(budget, name)
    if budget <= valset_size:
        raise PxnError(
            f"{budget} leaves nothing after the seed's validation ({valset_size} metric calls): "
            f"gepa would stop before its first proposal; give more than {valset_size}",
            subject=name,
        )


# The releases whose code pxn reads to record a run: the version, what pxn records of it,
# and how to install it.
RELEASES = {
    "gepa": ("0.1.4", "gepa", "gepa==0.1.4"),
    "dspy": ("3.4.1", "dspy.GEPA of dspy", "'gepa-pxn[dspy]'"),
}


def require_release(dist: str) -> None:
    """The installed `dist` ("gepa" or "dspy") must be the release pxn reads."""
    supported, what, install = RELEASES[dist]
    version = importlib.metadata.version(dist)
    if version != supported:
        raise PxnError(
            f"is {version}; pxn records {what} {supported} only (pip install {install})",
            subject=f"{dist} version",
        )
