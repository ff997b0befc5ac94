"""The run directory a recording writes into: held by one recording at a time in this
process, its trace resumed or overwritten only when asked, and gepa's saved state in its
run_dir continued only by a resumed recording.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

from gepa.core.state import GEPAState

from pxn.errors import PxnError
from pxn.trace import Resume, RunStart
from pxn.trace_reading import read_trace

_RECORDED: set[Path] = set()  # the run directories a `with recording(...)` block writes into
_RECORDED_LOCK = threading.Lock()


def claim_run_directory(out: Path, trace_path: Path, *, resume: bool, overwrite: bool) -> Path:
    """Claim `out` for a recording entering its block (its resolved path): a trace there is
    resumed or overwritten only when asked, a resumed one must be resumable, and no other
    recording in this process may write there (one nested in it, say)."""
    exists = trace_path.exists()
    if resume and not exists:
        raise PxnError(f"{out} holds no trace to resume", subject="run directory")
    if exists and not (resume or overwrite):
        raise PxnError(
            f"{out} already holds a trace: resume it, overwrite it, or choose a new directory",
            subject="run directory",
        )
    if resume:
        check_resumable(out)
    where = out.resolve()
    with _RECORDED_LOCK:
        if where in _RECORDED:
            raise PxnError(
                f"{out} is being recorded into already (by a recording around this one?): give "
                "each run its own directory",
                subject="run directory",
            )
        _RECORDED.add(where)
    return where


def no_longer_recorded(claimed: Path) -> None:
    with _RECORDED_LOCK:
        _RECORDED.discard(claimed)


def gepa_saved_state(run_dir: Path, *, resume: bool, overwrite: bool) -> GEPAState | None:
    """gepa's saved state in `run_dir` when resuming; an overwritten run's removed (else gepa
    would resume from it), and another run's refused."""
    saved = (run_dir / "gepa_state.bin").exists()
    if resume and saved:
        return GEPAState.load(str(run_dir))
    if not resume and overwrite and run_dir.exists():
        shutil.rmtree(run_dir)  # else gepa would resume from the old run's state
    elif saved and not resume:
        raise PxnError(
            f"{run_dir} holds gepa's saved state of an earlier run, which gepa would "
            "continue: resume that run's recording, overwrite it, or give a new run_dir",
            subject="run_dir",
        )
    return None


# What an iteration is: a resumed session that changed them would append another run's iterations.
SAME_SETUP = ("shape", "valset_size", "trainset_size", "minibatch")


class RunFinished(PxnError):
    """Resuming a run whose trace already ends with a completed run_end."""


def check_resumable(out: Path) -> None:
    """RunFinished when the run in `out` completed: resuming it would change nothing."""
    end = read_trace(out / "trace.jsonl").run_end
    if end is not None and end.status == "completed":
        raise RunFinished(
            f"{out} finished already ({end.metric_calls} metric calls, {end.iterations} "
            "iterations): nothing to resume"
        )


def check_same_setup(out: Path, now: RunStart) -> None:
    """The resumed session's setup (`now`, gepa.optimize's arguments as run_start would say
    them) must be the trace's: the same shape, data sizes and b."""
    before = read_trace(out / "trace.jsonl").run_start
    changed = [
        f"{name} {getattr(before, name)} -> {getattr(now, name)}"
        for name in SAME_SETUP
        if getattr(before, name) != getattr(now, name)
    ]
    if changed:
        raise PxnError(
            f"{out} holds a run with another setup ({'; '.join(changed)}): resume it with the "
            "arguments it started with, or record a new run elsewhere",
            subject="run directory",
        )


def drop_torn_line(path: Path) -> float:
    """Drop a torn last line (a kill mid-write) and return the last event's end time, so the
    resumed run's clock continues from it."""
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(raw.rfind(b"\n") + 1)
    return max(e.end for e in read_trace(path).events)


def resume_event(now: float, saved: Any) -> Resume:
    """Where the resumed session starts: the iterations gepa's saved state (a GEPAState; None
    when gepa saved none) completed and the metric calls it counted."""
    completed = saved.i + 1 if saved is not None else -1
    used = saved.total_num_evals if saved is not None else 0
    return Resume(start=now, end=now, iteration=completed, metric_calls=used)
