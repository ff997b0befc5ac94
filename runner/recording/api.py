"""The `with recording(...)` block around one `gepa.optimize` or `optimize_anything` run.

`rec.wrap(...)` returns gepa's arguments with the parts wrapped (optimize_anything's in
its GEPAConfig, its adapter reached when gepa builds it) and writes run_start or a resume
event; leaving the block, however it is left, writes run_end with the run's totals
checked against gepa's own (`rec.result`). Times are seconds since the run started, a
resumed run's running on.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from gepa.strategies.proposal_selection import AllImprovements

from pxn.errors import PxnError
from pxn.runner.recording.adapter_wrapper import (
    AdapterSeam,
    LessRefinements,
    RecordingSelection,
    TimedDefaultAdapter,
    running_note,
    wrap_adapter,
)
from pxn.runner.recording.anything_arguments import (
    anything_meta,
    check_anything_arguments,
    gepa_view,
    is_optimize_anything,
    recorded_config,
    workers_of,
)
from pxn.runner.recording.arguments import (
    check_gepa_arguments,
    check_options,
    checked_out,
    gepa_shape,
    require_release,
    run_start,
)
from pxn.runner.recording.calls import ReflectionReport, RolloutNote, RolloutReport
from pxn.runner.recording.events import RolloutLabels
from pxn.runner.recording.lm_wrapper import wrap_reflection_lm
from pxn.runner.recording.recorder import Recorder
from pxn.runner.recording.run_directory import (
    check_same_setup,
    claim_run_directory,
    drop_torn_line,
    gepa_saved_state,
    no_longer_recorded,
    resume_event,
)
from pxn.runner.recording.stopping import StopWatch, default_limit
from pxn.runner.recording.totals import RecordedRun, run_totals
from pxn.runner.redact import describe_error, redact
from pxn.trace import RunEnd, RunStart, TraceWriter
from pxn.trace_reading import read_trace


class Recording:
    """A recording into directory `out` (created); use it as a context manager around
    `gepa.optimize(**rec.wrap(...))`.

    workers: rollouts your adapter runs at once, if you know it (else the trace says what
      it saw). reflection_concurrency: reflections in flight at once (default: what gepa
      does with your LM). resume / overwrite: what to do when `out` already holds a trace.
    meta: extra facts for run_start (no secrets). max_reflection_failures: reflections in
      a row that produce no proposal before the run is stopped (default max(5, 2 P N)).
    reports_rollouts: when a call of your adapter raises, it has reported every rollout
      it started (`rec.report_rollout`), so a rollout it did not report never ran.
    """

    def __init__(
        self,
        out: str | Path,
        *,
        workers: int | None = None,
        reflection_concurrency: int | None = None,
        resume: bool = False,
        overwrite: bool = False,
        meta: dict[str, Any] | None = None,
        max_reflection_failures: int | None = None,
        reports_rollouts: bool = False,
    ):
        meta = meta or {}
        check_options(
            resume=resume,
            overwrite=overwrite,
            reports_rollouts=reports_rollouts,
            meta=meta,
            workers=workers,
            reflection_concurrency=reflection_concurrency,
            max_reflection_failures=max_reflection_failures,
        )
        self.out = out = checked_out(out)
        self.trace_path = out / "trace.jsonl"
        self._workers = workers
        self._reflection_concurrency = reflection_concurrency
        self._resume = resume
        self._overwrite = overwrite
        self._meta = meta
        self._max_failures = max_reflection_failures
        self._reports_rollouts = reports_rollouts
        self._recorder: Recorder | None = None
        self._entered = False  # inside the `with` block
        self._claimed = out  # the directory it writes into, resolved when the block starts
        self._used = False  # its `with` block was entered once: one recording, one run
        self._offset = 0.0
        self._t0 = 0.0
        self._run_workers = workers  # W as run_start declares it: given, or the run's own
        self._run_meta = meta
        self._stops: StopWatch | None = None
        self._seam: AdapterSeam | None = None  # optimize_anything's adapter, reached
        self._resumed = False
        self.result: RecordedRun | None = None

    def clock(self) -> float:
        """Seconds since the run started (a resumed run's clock runs on from its trace)."""
        return self._offset + (time.perf_counter() - self._t0)

    def report_rollout(self, index: int, report: RolloutReport) -> None:
        """A rollout of the adapter call in flight, `index` its position among the call's
        examples (pairs flattened in gepa's order). Any thread."""
        self._live().rollouts.report(index, report)

    def rollout(self, index: int) -> AbstractContextManager[RolloutNote]:
        """Time one rollout where it runs, from any thread:

            with rec.rollout(index) as note:
                note.score = run_and_score(candidate, example)

        `index` is the example's position among the adapter call's examples (pairs
        flattened in gepa's order); its slot is the lowest free while it runs, so the
        trace's W is the most in flight. A raise inside is recorded as its error."""
        return self._live().rollouts.rollout(index)

    def rollout_note(self) -> RolloutNote | None:
        """The note of the rollout timed on this thread while it runs (an optimize_anything
        evaluator call), to tell its tokens, cost and tries; None elsewhere."""
        return running_note()

    def report_reflection(self, index: int, report: ReflectionReport | None) -> None:
        """A reply of the reflection LM call in flight (`index`: the prompt's position);
        None when the LM answered without a call. Any thread."""
        self._live().reflections.report(index, report)

    def report_attempt(
        self, *, call: str, slot: int, attempt: int, start: float, end: float, error: str
    ) -> None:
        """A failed try of an LM call ("rollout" or "reflection") that was retried or given up."""
        self._live().report_attempt(
            call=call, slot=slot, attempt=attempt, start=start, end=end, error=error
        )

    @property
    def phase(self) -> str:
        """The rollout phase of the adapter call in flight."""
        return self._live().phase

    @property
    def iteration(self) -> int:
        """gepa's iteration in flight (0: the seed's validation)."""
        return self._live().iteration

    def progress(self) -> dict[str, Any]:
        """What the live progress line shows: iteration, accepted, metric calls, best val."""
        rec = self._recorder
        if rec is None:
            return {"iteration": 0, "accepted": 0, "metric_calls": 0, "best_val": None}
        return {
            "iteration": rec.iteration,
            "accepted": rec.decisions.accepted,
            "metric_calls": max(rec.metric_calls, rec.rollouts.written),
            "best_val": rec.best_val,
        }

    @property
    def resuming(self) -> bool:
        return self._resume

    def _live(self) -> Recorder:
        if self._recorder is None:
            raise PxnError(
                "has not started: call rec.wrap(...) inside the `with recording(...)` block first",
                subject="the recording",
            )
        return self._recorder

    def __enter__(self) -> Recording:
        require_release("gepa")
        if self._used:
            raise PxnError(
                "records one run: create a new recording(...) for the next one",
                subject="a recording",
            )
        self._claimed = claim_run_directory(
            self.out, self.trace_path, resume=self._resume, overwrite=self._overwrite
        )
        self._entered = self._used = True
        return self

    def wrap(self, **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments of `gepa.optimize` or of `optimize_anything`, with the parts
        recorded; writes run_start (or, resuming, a resume event)."""
        if not self._entered:
            raise PxnError(
                "is called inside the `with recording(...) as rec:` block, around "
                "gepa.optimize(**rec.wrap(...)) or optimize_anything(**rec.wrap(...))",
                subject="rec.wrap",
            )
        if self._recorder is not None:
            raise PxnError(
                "was called already: one recording records one gepa.optimize or "
                "optimize_anything run",
                subject="rec.wrap",
            )
        if is_optimize_anything(kwargs):
            return self._wrap_anything(kwargs)
        check_gepa_arguments(kwargs)
        meta: dict[str, Any] = {"api": "gepa.optimize"}
        workers = self._workers
        if kwargs.get("adapter") is None:  # gepa would build its default adapter: built here
            adapter = TimedDefaultAdapter(kwargs["task_lm"], kwargs.get("evaluator"), self)
            kwargs = {k: v for k, v in kwargs.items() if k not in ("task_lm", "evaluator")}
            kwargs["adapter"] = adapter
            meta |= {"task_lm": adapter.label, "max_litellm_workers": adapter.max_litellm_workers}
            workers = workers or adapter.max_litellm_workers
        run_dir = Path(kwargs.get("run_dir") or self.out / "gepa")
        parts = self._start(kwargs, run_dir, workers, meta)
        reflection_lm = parts.pop("reflection_lm")
        wrapped = {**kwargs, **parts, "adapter": self._recorded_adapter(kwargs["adapter"])}
        if reflection_lm is not None:
            wrapped["reflection_lm"] = reflection_lm
            wrapped.pop("reflection_lm_kwargs", None)  # used above to build the same LM
        return wrapped

    def _wrap_anything(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """optimize_anything's arguments with its config holding the recorder's parts."""
        check_anything_arguments(kwargs)
        view = gepa_view(kwargs)
        run_dir = Path(view.get("run_dir") or self.out / "gepa")
        seam = AdapterSeam(str(run_dir), self._recorded_adapter, self)
        seam.install()
        try:
            parts = self._start(
                view, run_dir, self._workers or workers_of(kwargs), anything_meta(kwargs)
            )
        except BaseException:
            seam.remove()
            raise
        self._seam = seam
        return {**kwargs, "config": recorded_config(kwargs.get("config"), parts)}

    def _recorded_adapter(self, adapter: Any) -> Any:
        # Resuming gepa's saved state, gepa validates the seed again only to throw it away.
        return wrap_adapter(adapter, self._live(), skip_seed_val=self._resumed)

    def _start(
        self, kwargs: dict[str, Any], run_dir: Path, workers: int | None, meta: dict[str, Any]
    ) -> dict[str, Any]:
        """The recorder, and its parts as gepa.optimize's keyword arguments (reflection_lm
        None: none was given), for a run with gepa.optimize's `kwargs` (or what
        optimize_anything's stand for): run_start written (or a resume event)."""
        self._run_workers = workers
        self._run_meta = {**meta, **self._meta}
        if self._resume:
            check_same_setup(self.out, self._run_start(kwargs, None))
        saved = gepa_saved_state(run_dir, resume=self._resume, overwrite=self._overwrite)
        p, n = (int(x) for x in gepa_shape(kwargs.get("sampling_strategy")).split("x"))
        labels = RolloutLabels(kwargs["trainset"], kwargs.get("valset"))
        self.out.mkdir(parents=True, exist_ok=True)
        self._offset = drop_torn_line(self.trace_path) if self._resume else 0.0
        if not self._resume:
            self.trace_path.unlink(missing_ok=True)  # overwritten
        self._t0 = time.perf_counter()
        self._recorder = rec = Recorder(
            TraceWriter(self.trace_path, append=self._resume),
            self.clock,
            labels,
            max_failures=self._max_failures or default_limit(p, n),
            reports_rollouts=self._reports_rollouts,
        )
        reflection_lm = wrap_reflection_lm(
            kwargs.get("reflection_lm"), rec, kwargs.get("reflection_lm_kwargs")
        )
        stoppers = kwargs.get("stop_callbacks")
        if not isinstance(stoppers, Sequence):
            stoppers = [] if stoppers is None else [stoppers]
        self._stops = StopWatch(
            run_dir,
            max_metric_calls=kwargs.get("max_metric_calls"),
            max_candidate_proposals=kwargs.get("max_candidate_proposals"),
            max_reflection_cost=kwargs.get("max_reflection_cost"),
            reflection_lm=reflection_lm,
        )
        watched = self._stops.watched(list(stoppers))
        self._resumed = saved is not None
        if self._resume:
            rec.sink.write(resume_event(self.clock(), saved))
        else:
            rec.sink.write(self._run_start(kwargs, reflection_lm))
        return {
            "run_dir": str(run_dir),
            "callbacks": [rec, *(kwargs.get("callbacks") or [])],
            "stop_callbacks": [*watched, rec.failures],
            "selection_strategy": RecordingSelection(
                kwargs.get("selection_strategy") or AllImprovements(), rec
            ),
            "reflection_lm": reflection_lm,
        }

    def _run_start(self, kwargs: dict[str, Any], reflection_lm: Any) -> RunStart:
        return run_start(
            kwargs,
            reflection_lm,
            workers=self._run_workers,
            reflection_concurrency=self._reflection_concurrency,
            meta={**self._run_meta, "stop_callbacks": self._stops.names}
            if self._stops is not None
            else self._run_meta,
        )

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any):
        self._entered = False
        if self._seam is not None:
            self._seam.remove()  # gepa's own adapter class again, built or not
        no_longer_recorded(self._claimed)
        rec = self._recorder
        if rec is None and kind is None:
            warnings.warn(
                f"nothing was recorded into {self.out}: pass gepa.optimize's (or "
                "optimize_anything's) arguments through rec.wrap(...) inside the `with "
                "recording(...)` block",
                RuntimeWarning,
                stacklevel=2,
            )
        if rec is not None:
            rec.stages.settle()  # gepa has moved on
        path = self.trace_path
        if not self._resume and path.exists() and path.stat().st_size == 0:
            # This session opened a new trace and was stopped before run_start (Ctrl-C, an
            # error while wrapping): no trace.
            if rec is not None:
                rec.sink.close()
            path.unlink()
            return False
        if rec is None:
            return False
        status, message = _ending(kind, exc, rec.failures.stop_reason)
        state = rec.state
        if status == "completed" and self._stops is not None:
            message = self._stops.ended_by(state)
        refined = self._seam.timed.refined_calls if self._seam and self._seam.timed else 0
        end = self.clock()
        self.result = run_totals(
            read_trace(self.trace_path),
            status,
            message,
            state if not refined or state is None else LessRefinements(state, refined),
            self._run_workers,
        )
        if refined and status == "completed":
            message = (
                f"{message}; gepa counted {refined} more metric calls: the refiner's evaluations "
                "inside the minibatches' rollouts"
            ).lstrip("; ")
            self.result = replace(self.result, metric_calls=state.total_num_evals, message=message)
        rec.sink.write(
            RunEnd(
                start=end,
                end=end,
                status=status,
                metric_calls=self.result.metric_calls,
                iterations=self.result.iterations,
                message=redact(message),
                workers=self.result.workers_seen,
            )
        )
        rec.sink.close()
        return False


def _ending(
    kind: type[BaseException] | None, exc: BaseException | None, stop_reason: str | None
) -> tuple[str, str]:
    """run_end's status and message, from how the `with` block was left."""
    if kind is None:
        return ("failed", stop_reason) if stop_reason else ("completed", "")
    if issubclass(kind, KeyboardInterrupt):
        return "interrupted", "interrupted by the user (Ctrl-C)"
    return "failed", describe_error(exc)  # type: ignore[arg-type]


recording = Recording
