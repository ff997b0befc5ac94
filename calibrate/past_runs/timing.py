"""A past run's wall-clock, from whatever the run left, and how well it is known.

In the order preferred: the user's figure (to half its last digit); an MLflow run's start
and end (to the millisecond); DSPy's log lines, first to last (to two seconds, the work
after the last line left out); the run_dir's files' times, start to end, or from the seed
validation's end with the seed's validation at most its calls' share of the rest. With
none, one line asks for `--wall-clock`.

The files' times (gepa 0.1.4's writes): gepa stamps nothing, but some files are last
written at known moments: the seed's `generated_best_outputs_valset/task_*/iter_0_prog_0.*`
right after its validation; gepa_state.bin, run_log.json and candidates.json (in that
order) at every iteration and at the end; an empty `run_log_stderr.txt` at the start
(gepa.optimize's own logger). They are trusted as far as the directory kept them (cp -p,
rsync -a, tar do; git and a plain cp do not): files out of gepa's order, or a run resumed
from its state, are not used for time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pxn.calibrate.past_runs.gepa_log import GepaLog
from pxn.calibrate.past_runs.mlflow_run import MlflowRun
from pxn.calibrate.past_runs.past_run import PastRun
from pxn.calibrate.past_runs.run_dir import CANDIDATES, RUN_LOG, STATE
from pxn.durations import format_duration, parse_duration
from pxn.errors import PxnError

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


@dataclass(frozen=True)
class WallClock:
    """The run's wall-clock: in [low, high] seconds, known to `precision` either side."""

    low: float
    high: float
    precision: float
    source: str  # where it came from, said as the report says it
    given: bool  # the user's figure, not one the run's own records measured

    @property
    def said(self) -> str:
        low, high = format_duration(self.low), format_duration(self.high)
        if low == high:
            return low if self.low == self.high else f"about {low}"
        return f"{low} to {high}"


def given_wall_clock(text: str) -> WallClock:
    """The user's figure ("47min", "1h30m"), to half its last unit."""
    seconds = parse_duration(text, "wall clock")
    digits = text.strip().lower()
    unit = 3600 if digits.endswith("h") else 60 if digits.endswith(("m", "min")) else 1
    decimals = len(digits.split(".")[1].rstrip("hmins")) if "." in digits else 0
    precision = 0.5 * unit * 10.0**-decimals
    return WallClock(seconds, seconds, precision, f"given ({text.strip()})", True)


def logged_wall_clock(log: GepaLog) -> WallClock | None:
    """From DSPy's log lines' times, when they hold gepa's first and a later line."""
    times = [line.time for line in log.lines if line.time is not None]
    if len(times) < 2:
        return None
    span = (max(times) - min(times)).total_seconds()
    return WallClock(
        span, span + 2.0, 0.5, f"DSPy's log lines ({log.source}), to the second", False
    )


def tracked_wall_clock(tracked: MlflowRun) -> WallClock:
    """From an MLflow run's start to its end (to its last metric point, while it is open)."""
    if tracked.end is None:
        span = tracked.last_time - tracked.start
        said = "start to its last metric point (the run was never ended)"
    else:
        span, said = tracked.end - tracked.start, "start and end"
    return WallClock(span, span, 0.5, f"the MLflow run {tracked.run_id}'s {said}", False)


def files_wall_clock(times: FileTimes, seed_calls: int, later_calls: int) -> WallClock | None:
    """From the files' times (module docstring), when they are trusted."""
    if not times.trusted:
        return None
    if times.start is not None:
        whole = times.end - times.start
        return WallClock(whole, whole, 0.5, f"the files' times: {times.why}", False)
    if times.seed_end is None:
        return None
    after = times.end - times.seed_end
    seed_at_most = after * seed_calls / max(later_calls, 1)
    return WallClock(
        after,
        after + seed_at_most,
        0.5,
        f"the files' times from the seed validation's end: {times.why}; the seed's "
        f"validation ({seed_calls} calls) taken as at most its calls' share of the rest",
        False,
    )


def run_wall_clock(
    run: PastRun,
    times: FileTimes,
    given: str | None,
    tracked: MlflowRun | None,
    log: GepaLog | None,
) -> WallClock:
    """The run's wall-clock from the first source it left, in the module docstring's order."""
    seed_calls = len(run.valset)
    found = [
        given_wall_clock(given) if given is not None else None,
        tracked_wall_clock(tracked) if tracked is not None else None,
        logged_wall_clock(log) if log is not None and log.timed else None,
        files_wall_clock(times, seed_calls, run.metric_calls - seed_calls),
    ]
    for clock in found:
        if clock is not None:
            return clock
    raise PxnError(
        "is not known: the directory keeps no times gepa's run can be timed by (its files' "
        "times do not mark the run, and no MLflow run or DSPy log was given); give the run's "
        "wall-clock, e.g. 47min, with the workers and reflection concurrency it ran with",
        subject="wall clock",
    )
