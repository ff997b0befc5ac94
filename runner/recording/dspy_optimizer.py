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

DSPy's adapter runs as DSPy runs it, each rollout and proposal timed where DSPy
runs it: DSPy's callbacks time each rollout as the student program's call on
one example, on its thread (the metric after it is not in it); an example is
known by its input values; tokens are what its LM calls reported, none for
cached calls. DspyAdapter proposes the texts itself, one proposal a call, so
C = 1 and each call is one reflection event, with its LM calls' tokens and
prompts added. At Ctrl-C a stage in DSPy's threads runs to its end; one on the
main thread stops at once.
"""

from __future__ import annotations

import importlib.metadata
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy
import gepa
from dspy.utils.callback import ACTIVE_CALL_ID, BaseCallback
from dspy.utils.usage_tracker import UsageTracker

from pxn.budget import dspy_auto_candidates
from pxn.errors import PxnError
from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.recording.adapter_wrapper import BatchAround, Items
from pxn.runner.recording.api import Recording, recording
from pxn.runner.recording.arguments import check_options, checked_out, require_release
from pxn.runner.recording.calls import ReflectionReport, RolloutReport
from pxn.runner.recording.totals import RecordedRun
from pxn.runner.redact import describe_error


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


class DspyRollouts(BatchAround):
    """DSPy's adapter, given to the recording as the user's: it reports each rollout's times
    and tokens and each proposal's tokens."""

    def __init__(self, inner: Any, rec: Recording):
        super().__init__(inner)
        self.rec = rec

    def _around(self, items: Items, call: Callable[[Items], list[Any]]) -> list[Any]:
        """`call` on a copy of each batch, DSPy's callbacks timing its rollouts (DSPy's
        evaluation of a batch is known by the batch's identity)."""
        own = [(candidate, list(batch)) for candidate, batch in items]
        clock = RolloutClock(self.rec, own)
        callbacks = [*dspy.settings.get("callbacks", []), clock]
        try:
            with dspy.context(callbacks=callbacks):
                results = call(own)
        except BaseException as exc:
            clock.report(None, describe_error(exc))
            raise
        clock.report([score for result in results for score in result.scores], None)
        return results

    def propose_new_texts(
        self,
        candidate: dict[str, str],
        reflective_dataset: Any,
        components_to_update: list[str],
    ) -> dict[str, str]:
        """DSPy's proposal, which the recording times as one reflection; this adds its tokens
        and prompt."""
        start = self.rec.clock()
        error: str | None = None
        usage, prompts = SharedUsage(), PromptsSeen()  # of the DSPy LM calls made in it
        callbacks = [*dspy.settings.get("callbacks", []), prompts]
        with dspy.context(usage_tracker=usage, callbacks=callbacks):
            try:
                return self.inner.propose_new_texts(
                    candidate, reflective_dataset, components_to_update
                )
            except BaseException as exc:
                error = describe_error(exc)
                raise
            finally:
                tokens_in, tokens_out = usage.tokens()
                # No reply text: DSPy's proposer parses its own reply (gepa's fences don't apply).
                report = ReflectionReport(
                    start=start,
                    end=self.rec.clock(),
                    error=error,
                    prompt=prompts.text(),
                    tokens_in=tokens_in,
                    tokens_out=tokens_out,
                )
                self.rec.report_reflection(0, report)


@dataclass
class Evaluation:
    """One DSPy `Evaluate` of a batch of the adapter call; `offset`: its first example's
    position among the call's examples."""

    offset: int
    batch: list[Any]
    claimed: set[int] = field(default_factory=set)

    def claim(self, inputs: dict[str, Any]) -> int | None:
        """The call's position of the unclaimed example DSPy runs the program on with these
        inputs (the example's own values); None for a run of an example already claimed
        (DSPy runs a straggler again, and keeps the first result)."""
        for position, example in enumerate(self.batch):
            if position not in self.claimed and _runs_with(example, inputs):
                self.claimed.add(position)
                return self.offset + position
        return None


def _runs_with(example: Any, inputs: dict[str, Any]) -> bool:
    """Whether DSPy's `program(**example.inputs())` got these inputs."""
    own = example.inputs()
    keys = list(own.keys())
    return sorted(keys) == sorted(inputs) and all(inputs[k] is own[k] for k in keys)


@dataclass
class Running:
    """A rollout of the call DSPy runs: its position, start, and its LM calls' tracker."""

    index: int
    start: float
    usage: SharedUsage
    scope: AbstractContextManager[Any]

    def ended(self, end: float, error: str | None) -> tuple[int, RolloutReport]:
        """Its position, and its report but for the score."""
        tokens_in, tokens_out = self.usage.tokens()
        return self.index, RolloutReport(
            self.start, end, tokens_in=tokens_in, tokens_out=tokens_out, error=error
        )


class RolloutClock(BaseCallback):
    """DSPy callbacks timing the rollouts of one adapter call where DSPy runs them: a
    program call whose caller is an `Evaluate` of one of the call's batches (DSPy's
    callback ids say who called whom)."""

    def __init__(self, rec: Recording, items: list[tuple[dict[str, str], list[Any]]]):
        self._rec = rec
        self._batches: dict[int, tuple[int, list[Any]]] = {}  # id(batch) -> offset, batch
        offset = 0
        for _, batch in items:
            self._batches[id(batch)] = (offset, batch)
            offset += len(batch)
        self._lock = threading.Lock()
        self._evaluations: dict[str, Evaluation] = {}  # Evaluate's call id -> its batch
        self._running: dict[str, Running] = {}  # the program call's id -> its rollout
        self._done: list[tuple[int, RolloutReport]] = []

    def on_evaluate_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        batch = inputs.get("devset") or instance.devset
        found = self._batches.get(id(batch))
        if found is not None:
            with self._lock:
                self._evaluations[call_id] = Evaluation(*found)

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self._lock:
            evaluation = self._evaluations.get(ACTIVE_CALL_ID.get())
            index = None if evaluation is None else evaluation.claim(inputs.get("kwargs", {}))
        if index is None:
            return  # a module inside the program, or nothing of this call
        usage = SharedUsage()
        scope = dspy.context(usage_tracker=usage)
        start = self._rec.clock()
        # Entered here and left in on_module_end: DSPy calls both on this thread, around
        # the program's call, so the program's LM calls report to this rollout's tracker.
        scope.__enter__()
        with self._lock:
            self._running[call_id] = Running(index, start, usage, scope)

    def on_module_end(
        self, call_id: str, outputs: Any | None, exception: Exception | None = None
    ) -> None:
        with self._lock:
            running = self._running.pop(call_id, None)
        if running is None:
            return
        end = self._rec.clock()
        running.scope.__exit__(None, None, None)
        error = None if exception is None else describe_error(exception)
        with self._lock:
            self._done.append(running.ended(end, error))

    def report(self, scores: list[float] | None, error: str | None) -> None:
        """Report every rollout that started, in start order, once the call returned (`scores`)
        or raised (`error`: the rollouts still running are cut here)."""
        now = self._rec.clock()
        with self._lock:
            cut = [r.ended(now, error) for r in self._running.values()]
            rollouts = [*self._done, *cut]
        for index, report in sorted(rollouts, key=lambda done: done[1].start):
            score = None if scores is None else scores[index]
            self._rec.report_rollout(index, replace(report, score=score))


class SharedUsage(UsageTracker):
    """DSPy's usage tracker, shared with the threads DSPy starts (it gives each thread a copy
    of the tracker in force, so a rollout's calls would be lost to the rollout)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedUsage:
        return self

    def tokens(self) -> tuple[int | None, int | None]:
        """Prompt and completion tokens; None when no call was billed (none was made, or DSPy's
        cache answered every one)."""
        totals = self.get_total_tokens().values()
        if not totals:
            return None, None
        return (
            sum(t.get("prompt_tokens") or 0 for t in totals),
            sum(t.get("completion_tokens") or 0 for t in totals),
        )


class PromptsSeen(BaseCallback):
    """DSPy callbacks noting the prompt of each LM call made while they are in force."""

    def __init__(self) -> None:
        self._prompts: list[str] = []
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        messages = inputs.get("messages") or inputs.get("prompt")
        if messages is not None:
            with self._lock:
                self._prompts.append(prompt_text(messages))

    def text(self) -> str | None:
        """The prompts joined in call order; None when no LM call was seen."""
        with self._lock:
            return "\n".join(self._prompts) if self._prompts else None
