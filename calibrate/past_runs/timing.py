"""A past run's wall-clock, from whatever the run left, and how well it is known.

In the order they are preferred:
1. the user's own figure (`--wall-clock 47min`): known to half its last
   digit, as they wrote it;
2. an MLflow run gepa or dspy.GEPA tracked (mlflow_run.py): its start and
   end, to the millisecond;
3. DSPy's log lines (gepa_log.py): its first line of gepa's ("Running GEPA
   for approx ...", before the seed's validation) to its last, each to the
   second: the span is known to two seconds, and the end of the last
   iteration's work after its last line is left out (gepa logs when each of
   its steps ends);
4. the run_dir's files (file_times.py): start to end where the start is
   marked; else the seed validation's end to the run's end, and the seed's
   validation itself bounded by the rest: at most its metric calls' share of
   the run's time after it (V calls run at once on the W workers, the rest in
   stages of b calls and reflections, so no slower per call).
With none of them, there is no time to calibrate the latencies from: one line
asks for `--wall-clock`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pxn.calibrate.past_runs.file_times import FileTimes
from pxn.calibrate.past_runs.gepa_log import GepaLog
from pxn.durations import format_duration, parse_duration
from pxn.errors import PxnError


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


def tracked_wall_clock(start: float, end: float | None, last: float, run_id: str) -> WallClock:
    """From an MLflow run's start to its end (to its last metric point, while it is open)."""
    if end is None:
        return WallClock(last - start, last - start, 0.5, f"the MLflow run {run_id}'s start to "
                         "its last metric point (the run was never ended)", False)  # fmt: skip
    return WallClock(end - start, end - start, 0.5, f"the MLflow run {run_id}'s start and end",
                     False)  # fmt: skip


def files_wall_clock(times: FileTimes, seed_calls: int, later_calls: int) -> WallClock | None:
    """From the files' times (module docstring), when they are trusted."""
    if not times.trusted:
        return None
    if times.whole is not None:
        return WallClock(times.whole, times.whole, 0.5, f"the files' times: {times.why}", False)
    after = times.after_seed
    if after is None:
        return None
    seed_at_most = after * seed_calls / max(later_calls, 1)
    return WallClock(
        after,
        after + seed_at_most,
        0.5,
        f"the files' times from the seed validation's end: {times.why}; the seed's "
        f"validation ({seed_calls} calls) taken as at most its calls' share of the rest",
        False,
    )


def choose_wall_clock(found: list[WallClock | None]) -> WallClock:
    """The first of the sources found, in the module docstring's order."""
    for clock in found:
        if clock is not None:
            return clock
    raise PxnError(
        "is not known: the directory keeps no times gepa's run can be timed by (its files' "
        "times do not mark the run, and no MLflow run or DSPy log was given); give the run's "
        "wall-clock, e.g. 47min, with the workers and reflection concurrency it ran with",
        subject="wall clock",
    )
