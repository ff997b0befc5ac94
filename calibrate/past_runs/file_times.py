"""The times a run_dir's own files keep, and what they mean (gepa 0.1.4's writes).

gepa stamps nothing with a time, but the file system stamps each file with
when it was last written, and some of gepa's files are last written at
known moments:

- `generated_best_outputs_valset/task_*/iter_0_prog_0.json`: written once,
  right after the seed's validation (gepa/core/state.py,
  initialize_gepa_state), and never again: the earliest of them is the
  seed validation's end;
- `gepa_state.bin`, `run_log.json`, `candidates.json`: rewritten at the top
  of every iteration and once after the last: the latest of them is the
  run's end;
- `run_log_stderr.txt`: opened (created) by gepa.optimize's own logger at the
  start of the run when given a run_dir and no logger, and written to only
  when something prints on stderr: while empty, its time is the run's
  start (dspy.GEPA passes its logger, so a log_dir has none).

How far to trust them: exactly as far as the directory kept its times. A
copy made with `cp -p`, `rsync -a`, `tar` or `zip` keeps them; `git`, a
plain `cp` or most downloads stamp every file with the copy's time, which
shows as files written in no order gepa would write them (each save writes
gepa_state.bin, then run_log.json, then candidates.json), or all at once. A
run resumed from its state (gepa's "Loading gepa state from run dir" in
run_log.txt) spans the pause: its times say nothing of the work.
Each is checked, and a directory that fails is not used for time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pxn.calibrate.past_runs.run_dir import CANDIDATES, RUN_LOG, STATE

SEED_OUTPUTS = "generated_best_outputs_valset"
STDERR_LOG = "run_log_stderr.txt"
RESUMED = "Loading gepa state from run dir"


@dataclass(frozen=True)
class FileTimes:
    """The moments the files mark, in seconds since the epoch (None: not marked)."""

    start: float | None  # the run's start (an empty run_log_stderr.txt)
    seed_end: float | None  # the seed validation's end (its outputs)
    end: float  # the run's end (the last save)
    trusted: bool
    why: str  # which files, and why they are trusted or not

    @property
    def after_seed(self) -> float | None:
        """Seconds from the seed validation's end to the run's end."""
        return None if self.seed_end is None else self.end - self.seed_end

    @property
    def whole(self) -> float | None:
        """Seconds from the run's start to its end."""
        return None if self.start is None else self.end - self.start


def file_times(path: Path, log_lines: tuple[str, ...]) -> FileTimes:
    """What the files' modification times say of the run at `path`."""
    saves = [path / name for name in (STATE, RUN_LOG, CANDIDATES) if (path / name).is_file()]
    end = max(p.stat().st_mtime for p in saves)
    seeds = sorted(p.stat().st_mtime for p in (path / SEED_OUTPUTS).glob("task_*/iter_0_prog_0.*"))
    seed_end = seeds[0] if seeds else None
    stderr = path / STDERR_LOG
    start = stderr.stat().st_mtime if stderr.is_file() and stderr.stat().st_size == 0 else None
    marks = [m for m in (start, seed_end) if m is not None]
    named = ", ".join(
        [f"{STDERR_LOG} (start)"] * (start is not None)
        + [f"{SEED_OUTPUTS}/ (the seed validation's end)"] * (seed_end is not None)
        + [f"{saves[0].name} (the end)"]
    )
    if not marks:
        why = (
            "no file marks the run's start or its seed validation's end (no "
            f"{SEED_OUTPUTS}/, no empty {STDERR_LOG})"
        )
        return FileTimes(None, None, end, False, why)
    if any(RESUMED in line for line in log_lines):
        return FileTimes(start, seed_end, end, False, "the run was resumed from its state "
                         "(run_log.txt): its files' times span the pause")  # fmt: skip
    if start is not None and seed_end is not None and start > seed_end:
        return FileTimes(start, seed_end, end, False, f"{named}: out of the order gepa writes "
                         "them (stamped by a copy?)")  # fmt: skip
    saved = [p.stat().st_mtime for p in saves]
    span = end - min(marks)
    if span <= 0 or saved != sorted(saved):
        why = (
            f"{named}: not in the order gepa writes them ({', '.join(p.name for p in saves)} "
            "last, in that order, after the seed's outputs): stamped by a copy?"
        )
        return FileTimes(start, seed_end, end, False, why)
    return FileTimes(
        start, seed_end, end, True, f"{named}: in gepa's order, {span:.0f} s apart; trusted as "
        "far as the directory kept its times (cp -p, rsync -a, tar keep them; git, plain cp "
        "do not)",
    )  # fmt: skip
