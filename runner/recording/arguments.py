"""The recording's arguments and gepa.optimize's, checked before anything runs or is
written, and run_start read from them.

A mistake gepa would meet only later (a budget of the wrong type, an empty trainset) or
one that leaves a trace no calibration can use (a budget the seed's validation spends) is
refused as the CLI refuses a bad flag. gepa.optimize needs a stopping condition of the
user's: the recorder adds a stopper of its own, so without one the run would never end.

run_start takes from `gepa.optimize`'s arguments (or those optimize_anything's stand for)
sizes, shape, budget, W, C, seed, the merge's setup and the names of the parts; no
argument's value beyond those (keys in `reflection_lm_kwargs` never reach it). meta's
`not_modelled` holds one line for each part of the run the simulator does not model (an
adapter evaluated pair after pair, say). C, when not given, is what gepa does with the
reflection LM: one at a time for an adapter that proposes or an LM without
`batch_complete`, gepa's thread cap for a model string, else every prompt of an iteration
at once.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

from gepa.strategies.proposal_selection import AllImprovements

from pxn.errors import PxnError
from pxn.fields import whole
from pxn.runner.recording.lm_wrapper import GEPA_LM_BATCH_WORKERS
from pxn.trace import RunStart


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
    budget = kwargs.get("max_metric_calls")
    if budget is not None:
        check_budget_after_seed(budget, val, "max_metric_calls")
    elif kwargs.get("max_reflection_cost") is None and not kwargs.get("stop_callbacks"):
        raise PxnError(
            "is needed (or max_reflection_cost, or stop_callbacks of your own): gepa "
            "needs a stopping condition",
            subject="max_metric_calls",
        )
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


def run_start(
    kwargs: dict[str, Any],
    lm: Any,
    *,
    workers: int | None,
    reflection_concurrency: int | None,
    meta: dict[str, Any],
) -> RunStart:
    """`kwargs`: gepa.optimize's; `lm`: the wrapped reflection LM (None: none given);
    `workers`, `reflection_concurrency`: as declared (None: not declared)."""
    shape = gepa_shape(kwargs.get("sampling_strategy"))
    trainset = kwargs["trainset"]
    valset = kwargs.get("valset")
    valset = trainset if valset is None else valset
    selection = kwargs.get("selection_strategy") or AllImprovements()
    adapter = kwargs.get("adapter")
    own: dict[str, Any] = {}
    if adapter is not None:
        own["adapter"] = type(adapter).__name__
        if not hasattr(adapter, "batch_evaluate"):
            own["evaluates"] = "pair_by_pair"
            own["not_modelled"] = [PAIR_BY_PAIR]
    return RunStart(
        start=0.0,
        end=0.0,
        source="runner",
        shape=shape,
        budget=int(kwargs.get("max_metric_calls") or 0),
        # 0: not declared; run_end then holds the most rollouts seen in flight.
        workers=workers or 0,
        reflection_concurrency=reflection_concurrency or _reflection_slots(adapter, lm, shape),
        valset_size=len(valset),
        trainset_size=len(trainset),
        minibatch=int(kwargs.get("reflection_minibatch_size") or 3),
        seed=int(kwargs.get("seed", 0)),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        meta={
            **merge_setup(kwargs),
            "selection": _selection_name(selection),
            **own,
            "reflection_lm": _lm_label(kwargs.get("reflection_lm")),
            "gepa": importlib.metadata.version("gepa"),
            "python": sys.version.split()[0],
            **meta,
        },
    )


PAIR_BY_PAIR = (
    "the adapter has no batch_evaluate, so gepa evaluates a stage's candidates one after "
    "another; the simulator pools W across them, so a batched shape's stages are predicted "
    "shorter than they run"
)


def merge_setup(kwargs: dict[str, Any]) -> dict[str, Any]:
    """gepa.optimize's merge arguments, at gepa 0.1.4's defaults when not given."""
    return {
        "use_merge": bool(kwargs.get("use_merge", False)),
        "max_merge_invocations": int(kwargs.get("max_merge_invocations", 5)),
        "components": len(kwargs.get("seed_candidate") or {}),
    }


def gepa_shape(sampling: Any) -> str:
    """PxN of gepa's sampling strategy (1x1 for gepa's default single proposal)."""
    p, n = getattr(sampling, "p", None), getattr(sampling, "n", None)
    name = type(sampling).__name__
    if name == "SameParentSampling":
        return f"1x{n}"
    if name == "IndependentSampling":
        return f"{n}x1"
    if p is not None and n is not None:
        return f"{p}x{n}"
    return "1x1"


def _reflection_slots(adapter: Any, lm: Any, shape: str) -> int:
    proposes = getattr(adapter, "propose_new_texts", None) is not None
    if proposes or lm is None or not hasattr(lm, "batch_complete"):
        return 1
    p, n = (int(x) for x in shape.split("x"))
    if type(lm.inner).__name__ == "MeteredLM":
        return min(p * n, GEPA_LM_BATCH_WORKERS)
    return p * n


def _selection_name(selection: Any) -> str:
    name = type(selection).__name__
    if name == "TopKImprovements":
        return f"topk:{selection.k}"
    return {"AllImprovements": "all", "BestImprovement": "best"}.get(name, name)


def _lm_label(lm: Any) -> str | None:
    if lm is None:
        return None
    return lm if isinstance(lm, str) else getattr(lm, "label", None) or type(lm).__name__
