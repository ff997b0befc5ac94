"""Record any `gepa.optimize` run into a pxn trace: the public API.

    import gepa
    from pxn.runner.record import recording

    with recording("runs/my-run") as rec:
        result = gepa.optimize(**rec.wrap(seed_candidate=..., trainset=..., valset=...,
                                          adapter=..., reflection_lm=..., max_metric_calls=...))

`rec.wrap` takes exactly the keyword arguments you would pass to
`gepa.optimize` and returns them with the adapter, the reflection LM, the
selection strategy, the callbacks and the stoppers wrapped (yours keep
working: your callbacks still get every event, your stoppers still stop).
The trace (runs/my-run/trace.jsonl, the schema of pxn.trace) is written event
by event, so a crash leaves a valid prefix; leaving the `with` block, by
return, exception or Ctrl-C, writes `run_end` with gepa's own totals checked
against the trace (`rec.result` then holds them; `completed_run(out, state)`
reads a completed run's back later, for work after gepa's loop). `pxn run`
records its built-in tasks through this same code.

What is recorded, and how well:
- every adapter call gepa makes, as one rollout per example with its phase,
  candidate, example ("train/i", "val/i": found by identity in your own
  trainset/valset lists), score and error. An adapter that times each
  rollout itself reports it (`rec.report_rollout(i, RolloutReport(...))`, i
  the example's position in the call, times from `rec.clock()`), or times it
  where it runs (`with rec.rollout(i) as note: note.score = ...`); otherwise
  each example spans the adapter call that ran it (gepa gives no finer view).
  When a call of an adapter that times its rollouts with `rec.rollout` raises
  (Ctrl-C, an error), its rollouts still running are written up to the raise
  and those never started are not written; `reports_rollouts=True` declares
  the same of an adapter that has reported every rollout it started by the
  time a call of it raises.
- every reflection LM call: a model string runs as gepa's own LM, each call
  timed with its tokens and cost; a plain callable or an object with
  `batch_complete` is timed per call it receives (the prompts of one
  `batch_complete` span it, unless the LM reports each with
  `rec.report_reflection`). An adapter with its own `propose_new_texts` (gepa
  then asks it, one proposal at a time, instead of the LM) has each call
  timed as one reflection; it may report its tokens with
  `rec.report_reflection(0, ReflectionReport(...))` from inside the call.
  A reflection reported with its `prompt` (and tokens_in) gets
  `prefix_tokens`, what its prompt shares with its parent's previous one (by another job)
  (pxn.runner.prompt_prefix); the prompt itself is never written.
- iterations, stages, validations, budget updates, accept/reject decisions.
- W: `workers=` says how many rollouts your adapter runs at once; without it
  the trace records the most it saw in flight (run_end.workers), which is
  what calibration then uses. Nothing of the run is made serial or parallel:
  every wrapper calls your code on the caller's thread.

Rules: gepa 0.1.4 only (another version is refused before anything runs);
`use_merge=True` is refused (the schema has no merge stage); a directory
that already holds a trace is refused unless `resume=True` (continue it:
gepa's state lives in runs/NAME/gepa unless you pass your own `run_dir`) or
`overwrite=True`. No argument's value is written to the trace except sizes,
the shape, the budget, the seed and the names of the parts, so keys in
`reflection_lm_kwargs` never reach it.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import shutil
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepa.core.state import GEPAState
from gepa.strategies.proposal_selection import AllImprovements

from pxn.errors import PxnError
from pxn.runner.recording.callbacks import GepaCallbacks
from pxn.runner.recording.labels import RolloutLabels
from pxn.runner.recording.recorder import Recorder
from pxn.runner.recording.reports import ReflectionReport, RolloutNote, RolloutReport
from pxn.runner.recording.stopper import Stopper, default_limit
from pxn.runner.recording.totals import mismatches, trace_totals
from pxn.runner.recording.wrappers import (
    GEPA_LM_BATCH_WORKERS,
    RecordingSelection,
    wrap_adapter,
    wrap_reflection_lm,
)
from pxn.runner.redact import describe_error, redact
from pxn.trace import (
    Reflection,
    Resume,
    Rollout,
    RunEnd,
    RunStart,
    Trace,
    TraceWriter,
    read_trace,
)

__all__ = [
    "RecordedRun",
    "Recording",
    "ReflectionReport",
    "RolloutNote",
    "RolloutReport",
    "completed_run",
    "recording",
]

SUPPORTED_GEPA = "0.1.4"


@dataclass(frozen=True)
class RecordedRun:
    """The whole run's totals as written in run_end (a resumed run: every session together)."""

    status: str  # completed | interrupted | failed
    message: str
    metric_calls: int  # gepa's count when completed; else the rollouts the trace holds
    iterations: int
    proposals: int
    accepted: int
    full_val_evals: int
    reflection_calls: int  # every call made, including work a resume redid
    tokens_in: int
    tokens_out: int
    cost: float | None
    wall_clock_s: float  # to the last traced event
    workers_seen: int  # the most rollouts in flight at once
    unfenced_replies: int  # reflection replies without a ``` pair (gepa took them whole)
    mismatches: tuple[str, ...]  # the trace against gepa's own totals; empty when they agree


class RunFinished(PxnError):
    """Resuming a run whose trace already ends with a completed run_end."""


def require_release(dist: str, supported: str, what: str, install: str) -> str:
    """The installed `dist` must be the release whose code pxn reads to record `what`
    ("gepa", "dspy.GEPA of dspy")."""
    version = importlib.metadata.version(dist)
    if version != supported:
        raise PxnError(
            f"is {version}; pxn records {what} {supported} only (pip install {install})",
            subject=f"{dist} version",
        )
    return version


def check_gepa() -> str:
    return require_release("gepa", SUPPORTED_GEPA, "gepa", f"gepa=={SUPPORTED_GEPA}")


def check_resumable(out: Path) -> None:
    """RunFinished when the run in `out` completed: resuming it would change nothing."""
    end = read_trace(out / "trace.jsonl").run_end
    if end is not None and end.status == "completed":
        raise RunFinished(
            f"{out} finished already ({end.metric_calls} metric calls, {end.iterations} "
            "iterations): nothing to resume"
        )


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
        if kwargs.get("use_merge"):
            raise PxnError("is not recorded: the trace has no merge stage", subject="use_merge")
        if kwargs.get("adapter") is None:
            raise PxnError(
                "is needed: pass your GEPAAdapter (gepa's default adapter is built inside "
                "gepa, out of the recorder's reach)",
                subject="adapter",
            )
        run_dir = Path(kwargs.get("run_dir") or self.out / "gepa")
        saved = self._saved_state(run_dir)
        shape = _shape(kwargs.get("sampling_strategy"))
        p, n = (int(x) for x in shape.split("x"))
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
            now = self.clock()
            completed = saved.i + 1 if saved is not None else -1
            used = saved.total_num_evals if saved is not None else 0
            rec.sink.write(Resume(start=now, end=now, iteration=completed, metric_calls=used))
        else:
            rec.sink.write(self._run_start(kwargs, shape, reflection_lm))
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
            self._offset = _drop_torn_line(self.trace_path)
        elif self.trace_path.exists():  # overwrite
            self.trace_path.unlink()
        self._t0 = time.perf_counter()

    def _run_start(self, kwargs: dict[str, Any], shape: str, lm: Any) -> RunStart:
        trainset = kwargs["trainset"]
        valset = kwargs.get("valset")
        valset = trainset if valset is None else valset
        selection = kwargs.get("selection_strategy") or AllImprovements()
        return RunStart(
            start=0.0,
            end=0.0,
            source="runner",
            shape=shape,
            budget=int(kwargs.get("max_metric_calls") or 0),
            # 0: not declared; run_end then holds the most rollouts seen in flight.
            workers=self._workers or 0,
            reflection_concurrency=self._reflection_concurrency
            or _reflection_slots(kwargs["adapter"], lm, shape),
            valset_size=len(valset),
            trainset_size=len(trainset),
            minibatch=int(kwargs.get("reflection_minibatch_size") or 3),
            seed=int(kwargs.get("seed", 0)),
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            meta={
                "selection": _selection_name(selection),
                "adapter": type(kwargs["adapter"]).__name__,
                "reflection_lm": _lm_label(kwargs.get("reflection_lm")),
                "gepa": importlib.metadata.version("gepa"),
                "python": sys.version.split()[0],
                **self._meta,
            },
        )

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
        if kind is None:
            stopped = rec.failures.stop_reason
            status, message = ("failed", stopped) if stopped else ("completed", "")
        elif issubclass(kind, KeyboardInterrupt):
            status, message = "interrupted", "interrupted by the user (Ctrl-C)"
        else:
            status, message = "failed", describe_error(exc)  # type: ignore[arg-type]
        end = self.clock()
        self.result = _totals(
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


def completed_run(out: str | Path, state: GEPAState) -> RecordedRun:
    """The totals of the run in `out` whose gepa loop completed, as its run_end's session
    found them: re-read from its trace and gepa's final `state` (saved in its run_dir), for
    work after gepa's loop that a resume finishes."""
    trace = read_trace(Path(out) / "trace.jsonl")
    end = trace.run_end
    if end is None or end.status != "completed":
        raise PxnError(f"{out} holds no run whose gepa loop completed", subject="run directory")
    return _totals(trace, end.status, end.message, state, trace.run_start.workers or None)


def _totals(
    trace: Trace, status: str, message: str, state: Any, workers: int | None
) -> RecordedRun:
    """The whole run's totals: the trace's, checked against gepa's `state` when completed;
    `workers` is the declared W (None: not declared)."""
    totals = trace_totals(trace)
    every_reflection = trace.of(Reflection)
    paid = [*trace.of(Rollout), *every_reflection]
    costs = [e.cost for e in paid if e.cost is not None]
    problems: list[str] = []
    if status == "completed" and state is not None:
        gepa_counts = {
            "metric_calls": state.total_num_evals,
            "full_val_evals": state.num_full_ds_evals,
            "accepted": len(state.program_candidates) - 1,
            "iterations": state.i + 1,
        }
        problems = mismatches(totals, workers=workers, **gepa_counts)
    else:  # gepa's counts lag the calls made: the trace holds the true ones
        gepa_counts = {
            "metric_calls": totals.metric_calls,
            "full_val_evals": totals.full_val_evals,
            "accepted": totals.accepted,
            "iterations": totals.iterations,
        }
    return RecordedRun(
        status=status,
        message=message,
        proposals=totals.proposals,
        reflection_calls=len(every_reflection),
        tokens_in=sum(e.tokens_in or 0 for e in paid),
        tokens_out=sum(e.tokens_out or 0 for e in paid),
        cost=sum(costs) if costs else None,
        wall_clock_s=round(max(e.end for e in trace.events), 3),
        workers_seen=totals.max_concurrent,
        unfenced_replies=sum(r.fenced is False for r in every_reflection),
        mismatches=tuple(problems),
        **gepa_counts,
    )


def _drop_torn_line(path: Path) -> float:
    """For a resume: drop a torn last line (a kill mid-write) and return the last event's
    end time, so the resumed run's clock continues from it."""
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(raw.rfind(b"\n") + 1)
    return max(e.end for e in read_trace(path).events)


def _shape(sampling: Any) -> str:
    """PxN of gepa's sampling strategy (1x1 for gepa's default single mutation)."""
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
    """Reflections gepa runs at once: one when the adapter proposes the texts or the LM has no
    `batch_complete`, gepa's LM's thread cap for a model string, else every prompt of a step."""
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
