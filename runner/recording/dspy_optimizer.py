"""Record `dspy.GEPA(...).compile(...)` with one line: `recorded(dspy.GEPA(...), out)`.

    optimizer = recorded(dspy.GEPA(metric=..., max_metric_calls=..., reflection_lm=...,
                                   num_threads=4), "runs/my-run")
    program = optimizer.compile(student, trainset=trainset, valset=valset)

`optimizer.result` then holds the run's totals and runs/my-run/trace.jsonl the
trace, recorded by api.py as any run. Assumptions (DSPy 3.4.1, gepa 0.1.4):
compile hands its DspyAdapter to `gepa.optimize`, looked up when it runs, so
while a recorded compile runs (one at a time per process) that name is the
recorded one; W is `num_threads` (else `dspy.settings.num_threads`); the
optimizer runs with DSPy's defaults, merges included; DSPy's cache makes the
trace measure the cache, so a warning says so; a budget given as `auto` or
`max_full_evals` is the one DSPy handed gepa, its origin in meta's
`budget_from`.
"""

from __future__ import annotations

import importlib.metadata
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dspy
import gepa

from pxn.budget import dspy_auto_candidates
from pxn.errors import PxnError
from pxn.runner.recording.api import recording
from pxn.runner.recording.arguments import check_options, checked_out, require_release
from pxn.runner.recording.dspy_rollouts import DspyRollouts
from pxn.runner.recording.totals import RecordedRun


def recorded(
    optimizer: Any,
    out: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    max_reflection_failures: int | None = None,
) -> RecordedGEPA:
    """`optimizer` (a dspy.GEPA), whose `compile` records its run into directory `out`;
    the options are `recording`'s."""
    require_release("dspy")
    if not isinstance(optimizer, dspy.GEPA):
        raise PxnError(
            f"must be a dspy.GEPA optimizer, got {type(optimizer).__name__}", subject="optimizer"
        )
    if optimizer.auto is not None:
        dspy_auto_candidates(optimizer.auto)  # compile would meet an unknown level as a KeyError
    options = {
        "resume": resume,
        "overwrite": overwrite,
        "max_reflection_failures": max_reflection_failures,
    }
    out = checked_out(out)
    check_options(**options)
    return RecordedGEPA(optimizer, out, options)


class RecordedGEPA:
    """A dspy.GEPA whose `compile` is recorded; every other attribute is the optimizer's."""

    def __init__(self, optimizer: Any, out: Path, options: dict[str, Any]):
        self.optimizer = optimizer
        self.out = out
        self.result: RecordedRun | None = None
        self._options = options  # recording's

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def compile(
        self, student: Any, *, trainset: list[Any], teacher: Any = None, valset: Any = None
    ) -> Any:
        workers = self.optimizer.num_threads or dspy.settings.num_threads
        lms = {
            "task_lm": dspy.settings.lm,
            "reflection_lm": self.optimizer.reflection_lm,
        }
        cached = [role for role, lm in lms.items() if getattr(lm, "cache", False)]
        if cached:
            warnings.warn(
                f"DSPy's cache is on for the {' and '.join(cached)}: a call it answers takes "
                "no time, so the trace measures the cache; create the LMs with cache=False "
                "to measure what a run costs",
                RuntimeWarning,
                stacklevel=2,
            )
        meta = {
            "dspy": importlib.metadata.version("dspy"),
            "program": type(student).__name__,
            "dspy_cache": bool(cached),
            **{role: getattr(lm, "model", None) for role, lm in lms.items()},
            **budget_from(self.optimizer),
        }
        rec = recording(
            self.out, workers=workers, meta=meta, reports_rollouts=True, **self._options
        )
        with rec:
            original = gepa.optimize

            def recorded_optimize(**kwargs: Any) -> Any:
                if "budget_from" in meta:  # run_start, written by rec.wrap, reads meta
                    meta["predictors"] = len(kwargs["seed_candidate"])
                adapter = DspyRollouts(kwargs["adapter"], rec)
                return original(**rec.wrap(**{**kwargs, "adapter": adapter}))

            with gepa_optimize_replaced(recorded_optimize):
                program = self.optimizer.compile(
                    student, trainset=trainset, teacher=teacher, valset=valset
                )
        self.result = rec.result
        return program


def budget_from(optimizer: Any) -> dict[str, str]:
    """Where the optimizer's budget comes from, when DSPy works it out: {"budget_from":
    "auto:light"} or {"budget_from": "full-evals:3"}; {} for metric calls given."""
    if optimizer.auto is not None:
        return {"budget_from": f"auto:{optimizer.auto}"}
    if optimizer.max_full_evals is not None:
        return {"budget_from": f"full-evals:{optimizer.max_full_evals}"}
    return {}


_REPLACED = threading.Lock()


@contextmanager
def gepa_optimize_replaced(optimize: Callable[..., Any]) -> Iterator[None]:
    """`gepa.optimize` is `optimize` inside the block (dspy.GEPA looks it up when it runs)."""
    if not _REPLACED.acquire(blocking=False):
        raise PxnError(
            "is already under way in this process: record one dspy.GEPA compile at a time",
            subject="a recorded compile",
        )
    original = gepa.optimize
    gepa.optimize = optimize
    try:
        yield
    finally:
        gepa.optimize = original
        _REPLACED.release()
