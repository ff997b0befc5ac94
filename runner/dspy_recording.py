"""Record `dspy.GEPA(...).compile(...)` into a pxn trace with one line.

    optimizer = recorded(dspy.GEPA(metric=..., max_metric_calls=..., use_merge=False,
                                   reflection_lm=..., num_threads=4), "runs/my-run")
    program = optimizer.compile(student, trainset=trainset, valset=valset)

Everything else in the script stays as it was; `optimizer.result` then holds
the run's totals (pxn.runner.record.RecordedRun) and runs/my-run/trace.jsonl
the trace. The recording itself is pxn.runner.record's, the one used for any
`gepa.optimize` run and by `pxn run`; this module only reaches into DSPy.

How, and what it assumes (DSPy 3.4.1, gepa 0.1.4):
- `dspy.GEPA.compile` builds its DspyAdapter inside and hands it straight to
  `gepa.optimize`, a name it imports when it runs: that is the only seam, so
  while a recorded compile runs, `gepa.optimize` is the recorded one. This is
  process-wide: one recorded compile at a time.
- Rollouts: each example of a stage runs as its own `DspyAdapter.evaluate`
  call (DSPy's own code: program, metric, traces, failure score), at most
  `num_threads` at once over the whole stage (DSPy's `num_threads` is the
  total evaluation concurrency shared by the candidates: W), each timed
  where it runs. DSPy splits the threads among a stage's candidates itself;
  recorded, a free thread takes the next rollout of any candidate. Tokens are
  what the rollout's LM calls reported (DSPy's usage tracker), none for calls
  DSPy's cache answered.
- Reflections: DspyAdapter proposes the texts itself (its instruction
  proposer on the reflection LM), and gepa calls it one proposal at a time,
  so C = 1 and each call is one reflection event, however many LM calls it
  made (one per component updated). When one raises, gepa asks again for
  every proposal of the step, one by one; the recorder numbers a step's jobs
  in the order it sees them, so after such a retry the events' proposal ids
  can be shifted within the step (their times and errors are right).
- gepa's merge has no stage in the trace: `use_merge=False` is required.
- DSPy's cache answers repeated calls in no time; with it on the trace
  measures the cache, so a warning says so and run_start's meta records it.
"""

from __future__ import annotations

import importlib.metadata
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import copy_context
from pathlib import Path
from typing import Any

import dspy
import gepa
from dspy.utils.usage_tracker import UsageTracker
from gepa.core.adapter import EvaluationBatch

from pxn.errors import PxnError
from pxn.runner.record import RecordedRun, Recording, recording
from pxn.runner.recorder import Recorder, ReflectionReport
from pxn.runner.redact import describe_error

SUPPORTED_DSPY = "3.4.1"


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
    if optimizer.use_merge:
        raise PxnError(
            "is on (dspy.GEPA's default) and the trace has no merge stage: "
            "create the optimizer with use_merge=False",
            subject="use_merge",
        )
    return RecordedGEPA(
        optimizer,
        Path(out),
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
        }
        rec = recording(self.out, workers=workers, meta=meta, **self._options)
        with rec:
            original = gepa.optimize

            def recorded_optimize(**kwargs: Any) -> Any:
                adapter = DspyRollouts(kwargs["adapter"], rec, workers)
                wrapped = rec.wrap(**{**kwargs, "adapter": adapter})
                adapter.recorder = next(c for c in wrapped["callbacks"] if isinstance(c, Recorder))
                return original(**wrapped)

            with gepa_optimize_replaced(recorded_optimize):
                program = self.optimizer.compile(
                    student, trainset=trainset, teacher=teacher, valset=valset
                )
        self.result = rec.result
        return program


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


class DspyRollouts:
    """DSPy's adapter, each rollout run and timed on its own, each reflection recorded.

    Given to the recording as the user's adapter: its wrapper tells the recorder of
    each stage, this one of each rollout within it and of each proposal.
    """

    def __init__(self, inner: Any, rec: Recording, workers: int):
        self.inner = inner
        self.rec = rec
        self.workers = workers
        self.recorder: Recorder | None = None  # set once the recording has wrapped the run

    def evaluate(
        self, batch: list[Any], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch:
        return self.batch_evaluate([(candidate, batch)], capture_traces=capture_traces)[0]

    def batch_evaluate(
        self, items: list[tuple[dict[str, str], list[Any]]], *, capture_traces: bool = True
    ) -> list[EvaluationBatch]:
        jobs = [(candidate, example) for candidate, batch in items for example in batch]
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="rollout")
        try:
            # Each rollout runs in a copy of this context: DSPy keeps its settings there.
            futures = [
                pool.submit(copy_context().run, self._rollout, i, cand, example, capture_traces)
                for i, (cand, example) in enumerate(jobs)
            ]
            singles = [f.result() for f in futures]
        finally:
            # On Ctrl-C the stage's rollouts not yet started never start.
            pool.shutdown(wait=False, cancel_futures=True)
        out, position = [], 0
        for _, batch in items:
            out.append(_joined(singles[position : position + len(batch)]))
            position += len(batch)
        return out

    def _rollout(
        self, index: int, candidate: dict[str, str], example: Any, capture_traces: bool
    ) -> EvaluationBatch:
        with self.rec.rollout(index) as note, lm_usage() as usage:
            result = self.inner.evaluate(
                [example], candidate, capture_traces=capture_traces, num_threads=1
            )
            note.score = result.scores[0]
            note.tokens_in, note.tokens_out = usage.tokens()
        return result

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> Any:
        return self.inner.make_reflective_dataset(candidate, eval_batch, components_to_update)

    def propose_new_texts(
        self,
        candidate: dict[str, str],
        reflective_dataset: Any,
        components_to_update: list[str],
    ) -> dict[str, str]:
        recorder = self.recorder
        if recorder is None:
            raise RuntimeError("the recording has not wrapped this adapter yet")
        recorder.begin_reflections(1)
        start = recorder.clock()
        error: str | None = None
        with lm_usage() as usage:
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
                    end=recorder.clock(),
                    error=error,
                    tokens_in=tokens_in,
                    tokens_out=tokens_out,
                )
                recorder.report_reflection(0, report)
                recorder.end_reflections(None, error)

    def get_adapter_state(self) -> dict[str, Any]:
        return self.inner.get_adapter_state()

    def set_adapter_state(self, state: dict[str, Any]) -> None:
        self.inner.set_adapter_state(state)


def _joined(singles: Sequence[EvaluationBatch]) -> EvaluationBatch:
    """One evaluation of a batch from its examples' evaluations, in order."""
    trajectories = None
    if all(s.trajectories is not None for s in singles):
        trajectories = []
        for position, single in enumerate(singles):
            # DSPy numbers a trace by its example's place in the batch evaluated.
            trajectories.extend({**t, "example_ind": position} for t in single.trajectories)
    objectives = [(s.objective_scores or [None])[0] for s in singles]
    return EvaluationBatch(
        outputs=[s.outputs[0] for s in singles],
        scores=[s.scores[0] for s in singles],
        trajectories=trajectories,
        objective_scores=objectives if any(objectives) else None,
    )


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


@contextmanager
def lm_usage() -> Iterator[SharedUsage]:
    """The LM usage of the DSPy code run in the block, on this thread and the threads it starts."""
    usage = SharedUsage()
    with dspy.context(usage_tracker=usage):
        yield usage


def check_dspy() -> None:
    """The installed dspy must be the release whose GEPA this module reads."""
    version = importlib.metadata.version("dspy")
    if version != SUPPORTED_DSPY:
        raise PxnError(
            f"is {version}; pxn records dspy.GEPA of dspy {SUPPORTED_DSPY} only "
            f"(pip install 'gepa-pxn[dspy]')",
            subject="dspy version",
        )
