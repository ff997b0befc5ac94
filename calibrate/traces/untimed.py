"""Adapter calls whose rollouts nothing timed, read from a trace; and the W their spans need.

A call's untimed rollouts share one (iteration, phase, start, end); its span is their
makespan on W workers (makespan.py). Set aside with a count: a call that raised, and one
with timed rollouts inside its span. W is the recording's `workers=`, else the
`workers` given, else the most timed rollouts in flight (a lower bound); a run with none
is refused in one line.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from pxn.errors import PxnError
from pxn.trace import Rollout
from pxn.trace_reading import Trace


@dataclass(frozen=True)
class UntimedCall:
    iteration: int
    phase: str
    span: float  # seconds
    size: int  # rollouts


def untimed_calls(trace: Trace) -> tuple[list[UntimedCall], int]:
    """The trace's untimed calls fit for a makespan, in the order they ran, and how many
    untimed calls were set aside (raised, or shared their span with timed rollouts)."""
    rollouts = trace.of(Rollout)
    keys = Counter((r.iteration, r.phase, r.start, r.end) for r in rollouts if not r.timed)
    raised = {(r.iteration, r.phase, r.start, r.end) for r in rollouts if not r.timed and r.error}
    timed = [r for r in rollouts if r.timed]
    calls, set_aside = [], 0
    for (iteration, phase, start, end), size in keys.items():
        shared = any(
            t.iteration == iteration and t.phase == phase and start <= t.start and t.end <= end
            for t in timed
        )
        if shared or (iteration, phase, start, end) in raised:
            set_aside += 1
            continue
        calls.append(UntimedCall(iteration, phase, end - start, size))
    return calls, set_aside


def resolve_workers(traces: list[Trace], workers: int | None) -> list[Trace]:
    """The traces, each run_start carrying the W its spans need (module docstring): `workers`
    for a run whose recording declared none; PxnError naming a run with untimed calls and no
    W to read them by."""
    if workers is not None and workers < 1:
        raise PxnError(f"must be a whole number >= 1: got {workers}", subject="workers")
    resolved = []
    for trace in traces:
        declared = trace.events[0].workers
        if declared == 0 and workers is not None:
            start = dataclasses.replace(trace.events[0], workers=workers)
            trace = dataclasses.replace(trace, events=[start, *trace.events[1:]])
        elif trace.run_start.workers == 0 and any(not r.timed for r in trace.of(Rollout)):
            raise PxnError(
                f"is unknown for {trace.path}: its adapter timed none of its rollouts, so each "
                "call's span is a makespan on W workers the trace does not name; record with "
                "recording(..., workers=W), or give W here",
                subject="workers",
            )
        resolved.append(trace)
    return resolved
