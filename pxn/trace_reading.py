"""Reading traces: a file's valid events (Trace), what was skipped, and loading the
traces a person points at (files or run directories), each run once.
"""

from __future__ import annotations

import functools
import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pxn.errors import PxnError
from pxn.trace import READABLE_VERSIONS, Event, Resume, Rollout, RunEnd, RunStart, event_from_dict

E = typing.TypeVar("E", bound=Event)


@dataclass
class Trace:
    """The valid events of a trace file, and what had to be skipped."""

    path: Path
    events: list[Event]
    skipped: list[str] = field(default_factory=list)  # "line N: what was wrong"

    @functools.cached_property
    def run_start(self) -> RunStart:
        """The first event; a recorded run that did not declare W (workers 0) takes the most
        rollouts run_end saw in flight, or, cut short before its run_end, the most in flight
        among the rollouts it holds (what run_end would have said)."""
        start: RunStart = self.events[0]  # type: ignore[assignment]
        if start.workers:
            return start
        end = self.run_end
        seen = end.workers if end is not None else max_concurrency(self.of(Rollout))
        return replace(start, workers=seen) if seen else start

    @property
    def run_end(self) -> RunEnd | None:
        last = self.events[-1]
        return last if isinstance(last, RunEnd) else None

    def of(self, cls: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, cls)]

    def live(self, cls: type[E]) -> list[E]:
        """The events of `cls` in the run gepa finished, without those a resume threw away
        (written before the Resume for later iterations: work gepa then redid)."""
        kept: list[E] = []
        for event in self.events:
            if isinstance(event, Resume):
                kept = [e for e in kept if getattr(e, "iteration", 0) <= event.iteration]
            elif isinstance(event, cls):
                kept.append(event)
        return kept


def max_concurrency(rollouts: Sequence[Rollout]) -> int:
    """The most timed rollouts in flight at once (an end at t frees its slot before a start at
    t). An untimed rollout spans its adapter call, as its call's others do: they overlap in
    the trace whether or not they ran at once, so they say nothing of W."""
    timed = [r for r in rollouts if r.timed]
    edges = sorted([(r.start, 1) for r in timed] + [(r.end, -1) for r in timed])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def read_trace(path: str | Path) -> Trace:
    """Read a trace, keeping every valid event.

    A truncated last line, an unknown event kind or a bad field is skipped and
    reported in `Trace.skipped` with its line number. A file that is not a trace
    of a readable version, whose run_start is unusable, or that holds a second
    run after the first (its iterations would count twice) raises PxnError.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise PxnError(f"{path} is not a text file; is it a pxn trace (JSON lines)?") from None
    except OSError as exc:
        raise PxnError(f"cannot read trace {path}: {exc.strerror}") from None
    events: list[Event] = []
    skipped: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            what = "truncated last line" if number == len(lines) else "not valid JSON"
            skipped.append(f"line {number}: {what}")
            continue
        if not events:  # without its header a trace cannot be read at all
            _check_header(path, number, data)
        try:
            event = event_from_dict(data)
        except ValueError as exc:
            if not events:
                raise PxnError(f"{path} line {number}: {exc}") from None
            skipped.append(f"line {number}: {exc}")
            continue
        if events and isinstance(event, RunStart):
            raise PxnError(
                f"{path} line {number}: a second run_start: the file holds two runs one after "
                f"the other; split it there (head -n {number - 1} and tail -n +{number}) and "
                "give each run its own file"
            )
        events.append(event)
    if not events:
        raise PxnError(f"trace {path} holds no events")
    return Trace(path, events, skipped)


def _check_header(path: Path, number: int, data: Any) -> None:
    if not isinstance(data, dict) or data.get("kind") != "run_start":
        raise PxnError(
            f"{path} line {number}: a trace starts with a run_start event; is this a pxn trace?"
        )
    if data.get("schema") not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise PxnError(
            f"{path}: trace schema version {data.get('schema')!r}, this pxn reads versions "
            f"{readable}; use the gepa-pxn release that wrote it"
        )


TRACE_NAME = "trace.jsonl"


def trace_path(path: str | Path) -> Path:
    """The trace file of a run directory, or the path itself when it is a file."""
    path = Path(path)
    if path.is_dir():
        inside = path / TRACE_NAME
        if not inside.is_file():
            raise PxnError(f"{path} is a directory without a {TRACE_NAME}; is it a run directory?")
        return inside
    if not path.exists():
        raise PxnError(f"{path}: no such run directory or trace file")
    return path


def read_one(path: str | Path) -> Trace:
    """Read one trace (a file or a run directory); PxnError naming the problem if unusable."""
    return read_trace(trace_path(path))


@dataclass
class Loaded:
    """The traces calibration can use, and what was set aside and why."""

    traces: list[Trace]
    rejected: list[str] = field(default_factory=list)  # "path: reason", one per trace

    @property
    def skipped_lines(self) -> list[str]:
        return [f"{t.path} {line}" for t in self.traces for line in t.skipped]


def load_traces(paths: Sequence[str | Path], *, need_rollouts: bool = True) -> Loaded:
    """Read every path (a file or a run directory): unusable traces are set aside with a
    one-line reason; none usable, or a run given twice, is a PxnError."""
    if not paths:
        raise PxnError("give at least one trace file or run directory")
    traces: list[Trace] = []
    rejected: list[str] = []
    for path in paths:
        try:
            trace = read_one(path)
        except PxnError as exc:
            rejected.append(str(exc))
            continue
        if need_rollouts and not trace.of(Rollout):
            rejected.append(f"{trace.path}: holds no rollout events")
            continue
        refuse_a_second_copy(trace, traces)
        traces.append(trace)
    if not traces:
        if len(rejected) == 1:
            raise PxnError(rejected[0])
        raise PxnError(f"none of the {len(rejected)} traces is usable; first: {rejected[0]}")
    return Loaded(traces, rejected)


def refuse_a_second_copy(trace: Trace, earlier: list[Trace]) -> None:
    """Refuse a run given twice, which would weigh double in every fit: the same file, or
    a copy holding the same events (two runs never do; an edited copy is another run)."""
    for other in earlier:
        if other.path.resolve() == trace.path.resolve():
            which = (
                f"{trace.path} is given twice"
                if other.path == trace.path
                else f"{other.path} and {trace.path} are the same file"
            )
            raise PxnError(f"{which}: give each run once")
        if other.events == trace.events:
            raise PxnError(
                f"{other.path} and {trace.path} hold the same run (the same events, one for "
                "one): give each run once"
            )
