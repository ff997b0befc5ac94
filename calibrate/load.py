"""Find and read the traces a person points at: run directories or trace files.

A run directory is `runs/NAME/` holding `trace.jsonl`. Unusable traces (not a
pxn trace, another schema version, no run_start, no rollouts) are set aside
with a one-line reason when others remain; calibrating from nothing is a
PxnError. Lines `read_trace` skipped are kept, with their line numbers, for
the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pxn.errors import PxnError
from pxn.trace import Rollout, Trace, read_trace

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
