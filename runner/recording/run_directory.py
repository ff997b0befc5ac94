"""The run directory a recording writes into: held by one recording at a time in this
process, its trace resumed or overwritten only when asked, and gepa's saved state in its
run_dir continued only by a resumed recording.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from gepa.core.state import GEPAState

from pxn.errors import PxnError
from pxn.runner.recording.resume import check_resumable

_RECORDED: set[Path] = set()  # the run directories a `with recording(...)` block writes into
_RECORDED_LOCK = threading.Lock()


def claim_run_directory(out: Path, trace_path: Path, *, resume: bool, overwrite: bool) -> Path:
    """Claim `out` for a recording entering its block (its resolved path): a trace there is
    resumed or overwritten only when asked, and a resumed one must be resumable."""
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
    return being_recorded(out)


def being_recorded(out: Path) -> Path:
    """Claim `out` for a recording (its resolved path); refused when another recording in this
    process writes there (a recording nested in one into the same directory)."""
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
