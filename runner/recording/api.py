"""The `with recording(...)` block around one `gepa.optimize` run (pxn.runner.record's API).

Entering checks the gepa release and the run directory; `rec.wrap(...)`
returns gepa.optimize's keyword arguments with the adapter, the reflection LM,
the selection, the callbacks and the stoppers wrapped (the user's keep
working), and writes run_start, or resuming, a resume event; leaving the
block, however it is left, writes run_end with the run's totals checked
against gepa's own (`rec.result`). One recording records one run.

The trace is written event by event, so a crash leaves a valid prefix, on
the recording's clock: seconds since the run started, a resumed run's clock
running on from its trace. The recorder's parts write the events between
(recorder.py); what a user sees of it all is docs/recording.md.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from gepa.core.state import GEPAState
from gepa.strategies.proposal_selection import AllImprovements

from pxn.errors import PxnError
from pxn.runner.recording.adapter_wrapper import wrap_adapter
from pxn.runner.recording.callbacks import GepaCallbacks
from pxn.runner.recording.labels import RolloutLabels
from pxn.runner.recording.lm_wrapper import wrap_reflection_lm
from pxn.runner.recording.recorder import Recorder
from pxn.runner.recording.reports import ReflectionReport, RolloutNote, RolloutReport
from pxn.runner.recording.resume import check_resumable, drop_torn_line, resume_event
from pxn.runner.recording.run_start import gepa_shape, run_start
from pxn.runner.recording.selection_wrapper import RecordingSelection
from pxn.runner.recording.stopper import Stopper, default_limit
from pxn.runner.recording.totals import RecordedRun, run_totals
from pxn.runner.recording.versions import check_gepa
from pxn.runner.redact import describe_error, redact
from pxn.trace import RunEnd, TraceWriter, read_trace


def recording(
    out: str | Path,
    *,
    workers: int | None = None,
    reflection_concurrency: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    meta: dict[str, Any] | None = None,
    max_reflection_failures: int | None = None,
    reports_rollouts: bool = False,
) -> Recording:
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
    return Recording(
        Path(out),
        workers=workers,
        reflection_concurrency=reflection_concurrency,
        resume=resume,
        overwrite=overwrite,
        meta=meta or {},
        max_reflection_failures=max_reflection_failures,
        reports_rollouts=reports_rollouts,
    )


class Recording:
    def __init__(
        self,
        out: Path,
        *,
        workers: int | None,
        reflection_concurrency: int | None,
        resume: bool,
        overwrite: bool,
        meta: dict[str, Any],
        max_reflection_failures: int | None,
        reports_rollouts: bool,
    ):
        if resume and overwrite:
            raise PxnError("resume and overwrite exclude each other", subject="recording")
        if workers is not None and workers < 1:
            raise PxnError(f"must be at least 1, got {workers}", subject="workers")
        self.out = out
        self.trace_path = out / "trace.jsonl"
        self._workers = workers
        self._reflection_concurrency = reflection_concurrency
        self._resume = resume
        self._overwrite = overwrite
        self._meta = meta
        self._max_failures = max_reflection_failures
        self._reports_rollouts = reports_rollouts
        self._recorder: Recorder | None = None
        self._callbacks: GepaCallbacks | None = None
        self._offset = 0.0
        self._t0 = 0.0
        self.result: RecordedRun | None = None

    # ---- the run's clock and the parts' reports ----

    def clock(self) -> float:
        """Seconds since the run started (a resumed run's clock runs on from its trace)."""
        return self._offset + (time.perf_counter() - self._t0)

    def report_rollout(self, index: int, report: RolloutReport) -> None:
        """A rollout of the adapter call in flight, `index` its position among the call's
        examples (pairs flattened in gepa's order). Any thread."""
        self._live().report_rollout(index, report)

    def rollout(self, index: int) -> AbstractContextManager[RolloutNote]:
        """Time one rollout where it runs, from any thread:

            with rec.rollout(index) as note:
                note.score = run_and_score(candidate, example)

        `index` is the example's position among the adapter call's examples (pairs
        flattened in gepa's order); its slot is the lowest free while it runs, so the
        trace's W is the most in flight. A raise inside is recorded as its error."""
        return self._live().rollout(index)

    def report_reflection(self, index: int, report: ReflectionReport | None) -> None:
        """A reply of the reflection LM call in flight (`index`: the prompt's position);
        None when the LM answered without a call. Any thread."""
        self._live().report_reflection(index, report)

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
        rec, gepa_said = self._recorder, self._callbacks
        if rec is None or gepa_said is None:
            return {"iteration": 0, "accepted": 0, "metric_calls": 0, "best_val": None}
        return {
            "iteration": rec.iteration,
            "accepted": rec.decisions.accepted,
            "metric_calls": max(gepa_said.metric_calls, rec.rollouts.written),
            "best_val": gepa_said.best_val,
        }

    @property
    def resuming(self) -> bool:
        return self._resume

    @property
    def stop_reason(self) -> str | None:
        """Why the recorder stopped gepa (reflections kept failing), if it did."""
        return self._recorder.failures.stop_reason if self._recorder else None

    def _live(self) -> Recorder:
        if self._recorder is None:
            raise RuntimeError("call rec.wrap(...) inside the `with recording(...)` block first")
        return self._recorder

    # ---- the run's start ----

    def __enter__(self) -> Recording:
        check_gepa()
        exists = self.trace_path.exists()
        if self._resume and not exists:
            raise PxnError(f"{self.out} holds no trace to resume", subject="run directory")
        if exists and not (self._resume or self._overwrite):
            raise PxnError(
                f"{self.out} already holds a trace: resume it, overwrite it, or choose a new "
                "directory",
                subject="run directory",
            )
        if self._resume:
            check_resumable(self.out)
        return self

    def wrap(self, **kwargs: Any) -> dict[str, Any]:
        """`gepa.optimize`'s keyword arguments, with the parts recorded; writes run_start (or,
        resuming, a resume event)."""
        if self._recorder is not None:
            raise RuntimeError("one recording records one gepa.optimize run")
        if kwargs.get("adapter") is None:
            raise PxnError(
                "is needed: pass your GEPAAdapter (gepa's default adapter is built inside "
                "gepa, out of the recorder's reach)",
                subject="adapter",
            )
        run_dir = Path(kwargs.get("run_dir") or self.out / "gepa")
        saved = self._saved_state(run_dir)
        p, n = (int(x) for x in gepa_shape(kwargs.get("sampling_strategy")).split("x"))
        labels = RolloutLabels(kwargs["trainset"], kwargs.get("valset"))
        self._start_trace()
        self._recorder = rec = Recorder(
            TraceWriter(self.trace_path, append=self._resume),
            self.clock,
            labels,
            max_failures=self._max_failures or default_limit(p, n),
            reports_rollouts=self._reports_rollouts,
        )
        self._callbacks = GepaCallbacks(rec)
        reflection_lm = wrap_reflection_lm(
            kwargs.get("reflection_lm"), rec, kwargs.get("reflection_lm_kwargs")
        )
        if self._resume:
            rec.sink.write(resume_event(self.clock(), saved))
        else:
            start = run_start(
                kwargs,
                reflection_lm,
                workers=self._workers,
                reflection_concurrency=self._reflection_concurrency,
                meta=self._meta,
            )
            rec.sink.write(start)
        stoppers = kwargs.get("stop_callbacks")
        if stoppers is None:
            stoppers = []
        elif not isinstance(stoppers, Sequence):
            stoppers = [stoppers]
        wrapped = {
            **kwargs,
            "adapter": wrap_adapter(kwargs["adapter"], rec, skip_seed_val=saved is not None),
            "selection_strategy": RecordingSelection(
                kwargs.get("selection_strategy") or AllImprovements(), rec
            ),
            "callbacks": [self._callbacks, *(kwargs.get("callbacks") or [])],
            "stop_callbacks": [*stoppers, Stopper(rec.failures)],
            "run_dir": str(run_dir),
        }
        if reflection_lm is not None:
            wrapped["reflection_lm"] = reflection_lm
            wrapped.pop("reflection_lm_kwargs", None)  # used above to build the same LM
        return wrapped

    def _saved_state(self, run_dir: Path) -> GEPAState | None:
        if self._resume and (run_dir / "gepa_state.bin").exists():
            return GEPAState.load(str(run_dir))
        if not self._resume and self._overwrite and run_dir.exists():
            shutil.rmtree(run_dir)  # else gepa would resume from the old run's state
        return None

    def _start_trace(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self._offset = 0.0
        if self._resume:
            self._offset = drop_torn_line(self.trace_path)
        elif self.trace_path.exists():  # overwrite
            self.trace_path.unlink()
        self._t0 = time.perf_counter()

    # ---- the run's end ----

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any):
        rec = self._recorder
        if rec is not None:
            rec.settle()
        if self._nothing_written():
            # Stopped between opening the trace and writing run_start (Ctrl-C, an error
            # while wrapping): no run to total, and an empty file is no trace. What
            # stopped it goes on.
            if rec is not None:
                rec.sink.close()
            self.trace_path.unlink()
            return False
        if rec is None:
            return False
        status, message = _ending(kind, exc, rec.failures.stop_reason)
        end = self.clock()
        self.result = run_totals(
            read_trace(self.trace_path), status, message, rec.position.state, self._workers
        )
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

    def _nothing_written(self) -> bool:
        """This session opened a new trace and wrote nothing to it."""
        path = self.trace_path
        return not self._resume and path.exists() and path.stat().st_size == 0


def _ending(
    kind: type[BaseException] | None, exc: BaseException | None, stop_reason: str | None
) -> tuple[str, str]:
    """run_end's status and message, from how the `with` block was left."""
    if kind is None:
        return ("failed", stop_reason) if stop_reason else ("completed", "")
    if issubclass(kind, KeyboardInterrupt):
        return "interrupted", "interrupted by the user (Ctrl-C)"
    return "failed", describe_error(exc)  # type: ignore[arg-type]
