"""Resuming a recorded run: refusing one that finished or one resumed with another setup,
repairing a torn last line, and the resume event that marks where the new session starts.

A resumed session appends to the same trace. A kill mid-write can leave the
last line torn: it is dropped, and the resumed run's clock continues from the
last event's end. gepa continues from the state it saved in its run_dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pxn.errors import PxnError
from pxn.trace import Resume, RunStart
from pxn.trace_reading import read_trace

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
