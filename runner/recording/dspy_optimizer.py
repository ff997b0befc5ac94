"""Record `dspy.GEPA(...).compile(...)` with one line: `recorded(dspy.GEPA(...), out)`.

    optimizer = recorded(dspy.GEPA(metric=..., max_metric_calls=..., reflection_lm=...,
                                   num_threads=4), "runs/my-run")
    program = optimizer.compile(student, trainset=trainset, valset=valset)

Everything else in the script stays as it was; `optimizer.result` then holds
the run's totals (RecordedRun) and runs/my-run/trace.jsonl the trace. The
recording itself is api.py's, the one used for any `gepa.optimize` run and by
`pxn run`; the DSPy modules only reach into DSPy (DSPy 3.4.1, gepa 0.1.4):
this one the optimizer, dspy_rollouts.py the rollouts and proposals,
dspy_usage.py their tokens and prompts.

Assumptions:
- `dspy.GEPA.compile` builds its DspyAdapter inside and hands it straight to
  `gepa.optimize`, a name it imports when it runs: that is the only seam, so
  while a recorded compile runs, `gepa.optimize` is the recorded one. This is
  process-wide: one recorded compile at a time.
- W is `num_threads` (else `dspy.settings.num_threads`), declared in run_start.
- The optimizer runs as created, DSPy's defaults included (`use_merge=True`,
  `max_merge_invocations=5`): gepa's merges are recorded as any run's.
- DSPy's cache answers repeated calls in no time; with it on the trace
  measures the cache, so a warning says so and run_start's meta records it.
- A budget given as `auto` or `max_full_evals` is DSPy's to turn into metric
  calls (compile does, before gepa runs): run_start's budget is the one DSPy
  handed gepa, and its meta says where it came from (`budget_from`, spelled
  as pxn's --budget takes it, e.g. "auto:light") and for how many predictors
  (the components of the seed candidate DSPy handed gepa: its count).
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
from pxn.runner.recording.arguments import check_dspy, check_options, checked_out
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
    """`optimizer` (a dspy.GEPA), whose `compile` records its run into directory `out`.

    resume / overwrite: what to do when `out` already holds a trace (as for
    pxn.runner.record.recording); max_reflection_failures: reflections in a row
    that give no proposal before the run is stopped.
    """
    check_dspy()
    if not isinstance(optimizer, dspy.GEPA):
        raise PxnError(
            f"must be a dspy.GEPA optimizer, got {type(optimizer).__name__}", subject="optimizer"
        )
    if optimizer.auto is not None:
        dspy_auto_candidates(optimizer.auto)  # compile would meet an unknown level as a KeyError
    out = checked_out(out)
    check_options(
        resume=resume, overwrite=overwrite, max_reflection_failures=max_reflection_failures
    )
    return RecordedGEPA(
        optimizer,
        out,
        resume=resume,
        overwrite=overwrite,
        max_reflection_failures=max_reflection_failures,
    )


class RecordedGEPA:
    """A dspy.GEPA whose `compile` is recorded; every other attribute is the optimizer's."""

    def __init__(
        self,
        optimizer: Any,
        out: Path,
        *,
        resume: bool,
        overwrite: bool,
        max_reflection_failures: int | None,
    ):
        self.optimizer = optimizer
        self.out = out
        self.result: RecordedRun | None = None
        self._options = {
            "resume": resume,
            "overwrite": overwrite,
            "max_reflection_failures": max_reflection_failures,
        }

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
