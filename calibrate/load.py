"""Find and read the traces a person points at: run directories or trace files.

A run directory is `runs/NAME/` holding `trace.jsonl`. Unusable traces (not a
pxn trace, another schema version, no run_start, no rollouts) are set aside
with a one-line reason when others remain; calibrating from nothing is a
PxnError. Lines `read_trace` skipped are kept, with their line numbers, for
the report.
"""

from __future__ import annotations

import functools
import json
import math
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from pxn.errors import PxnError
from pxn.trace import (
    SCHEMA_VERSION,
    Event,
    Resume,
    Rollout,
    RunStart,
    Trace,
    event_from_dict,
    read_trace,
)

TRACE_NAME = "trace.jsonl"
E = typing.TypeVar("E", bound=Event)


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


def _matches(value: object, hint: object) -> bool:
    """Whether a parsed JSON value fits a field's type (the few types the schema uses)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if origin is float and isinstance(value, int | float) and not isinstance(value, bool):
            return math.isfinite(value)
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if origin in (str, bool, dict) and isinstance(value, origin):
            return True
        if origin not in (float, int, str, bool, dict, type(None)):
            return True  # a type this check does not know: let it through
    return False


@functools.cache
def _hints(cls: type[Event]) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _problem(event: Event) -> str | None:
    """What is wrong with a parsed event's values, if anything."""
    hints = _hints(type(event))
    for f in fields(event):
        value = getattr(event, f.name)
        if f.name in hints and not _matches(value, hints[f.name]):
            return f"{event.kind} field {f.name} has a bad value {value!r}"
    if event.end < event.start:
        return f"{event.kind} ends ({event.end}) before it starts ({event.start})"
    return None


def _event_lines(path: Path, skipped: list[str]) -> list[int]:
    """The line number of each event read_trace kept: the non-blank lines it did not skip."""
    gone = {int(m[1]) for line in skipped if (m := re.match(r"line (\d+):", line))}
    text = path.read_text(encoding="utf-8").splitlines()
    return [n for n, line in enumerate(text, start=1) if line.strip() and n not in gone]


def check_values(trace: Trace) -> Trace:
    """Set aside events whose values have the wrong type (read_trace checks only names).

    A line like {"kind": "rollout", "start": "soon", ...} parses into an event;
    without this it would fail deep inside a fit with a traceback.
    """
    bad = [(i, why) for i, event in enumerate(trace.events) if (why := _problem(event))]
    if not bad:
        return trace
    numbers = _event_lines(trace.path, trace.skipped)
    dropped = {i for i, _ in bad}
    skipped = [*trace.skipped, *(f"line {numbers[i]}: {why}" for i, why in bad)]
    skipped.sort(key=lambda line: int(re.match(r"line (\d+)", line)[1]))
    events = [e for i, e in enumerate(trace.events) if i not in dropped]
    if not events or 0 in dropped:
        raise PxnError(f"{trace.path} {skipped[0]}")
    return Trace(trace.path, events, skipped)


def _check_run_start(path: Path) -> None:
    """Name what is wrong with a damaged run_start line itself.

    read_trace skips a run_start lacking a field and then reports the NEXT
    line as "not a run_start", which points at the wrong line.
    """
    try:
        with path.open(encoding="utf-8") as file:
            first = next(((n, line) for n, line in enumerate(file, start=1) if line.strip()), None)
    except (OSError, UnicodeDecodeError):
        return  # read_trace reports these
    if first is None:
        return
    number, line = first
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return
    header = isinstance(data, dict) and data.get("kind") == "run_start"
    if header and data.get("schema") == SCHEMA_VERSION:
        try:
            event_from_dict(data)
        except (ValueError, TypeError) as exc:
            raise PxnError(f"{path} line {number}: {exc}") from None


def _first_non_object(path: Path) -> int:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            if line.strip() and not isinstance(json.loads(line), dict):
                return number
        except json.JSONDecodeError:
            continue
    return 0


def read_one(path: str | Path) -> Trace:
    """Read one trace and check it can describe a run; PxnError naming the problem if not."""
    path = trace_path(path)
    _check_run_start(path)
    try:
        trace = check_values(read_trace(path))
    except UnicodeDecodeError:
        raise PxnError(f"{path} is not a text file; is it a pxn trace (JSON lines)?") from None
    except AttributeError:
        # read_trace assumes every JSON line is an object; name the one that is not.
        raise PxnError(f"{path} line {_first_non_object(path)}: not a JSON object") from None
    # read_trace checks the first line it parses; a run_start lacking a field is
    # skipped there, so make sure the first event really is the run's header.
    if not isinstance(trace.events[0], RunStart):
        reason = f" ({trace.skipped[0]})" if trace.skipped else ""
        raise PxnError(f"{trace.path}: its run_start event is unusable{reason}")
    return trace


@dataclass
class Loaded:
    """The traces calibration can use, and what was set aside and why."""

    traces: list[Trace]
    rejected: list[str] = field(default_factory=list)  # "path: reason", one per trace

    @property
    def skipped_lines(self) -> list[str]:
        return [f"{t.path} {line}" for t in self.traces for line in t.skipped]


def load_traces(paths: Sequence[str | Path], *, need_rollouts: bool = True) -> Loaded:
    """Read every path; keep the usable traces, fail only when none is usable."""
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
        traces.append(trace)
    if not traces:
        if len(rejected) == 1:
            raise PxnError(rejected[0])
        raise PxnError(f"none of the {len(rejected)} traces is usable; first: {rejected[0]}")
    return Loaded(traces, rejected)


def live_events(trace: Trace, cls: type[E]) -> list[E]:
    """The events of `cls` in the run gepa finished, without those a resume threw away.

    A resumed run restarts from the state saved before iteration
    `resume.iteration + 1`; events written before the Resume for later
    iterations belong to work gepa then redid. Counting them would count a
    proposal twice and put later proposals at the wrong index.
    """
    kept: list[E] = []
    for event in trace.events:
        if isinstance(event, Resume):
            kept = [e for e in kept if e.iteration <= event.iteration]  # type: ignore[attr-defined]
        elif isinstance(event, cls):
            kept.append(event)
    return kept
