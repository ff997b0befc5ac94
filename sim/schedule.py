"""Stage scheduling: a stage's jobs list-scheduled onto a pool of identical slots.

Inside one gepa stage every job is released at once (the stage starts after a
barrier), so a FIFO queue in front of `slots` workers is exactly list
scheduling in release order: each job starts on the slot that frees first.
Doing it in one step with a heap replaces a SimPy process per rollout.

Stages are small (a few to a few hundred jobs), so these work on plain Python
lists: at that size numpy's per-call overhead costs more than the loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def list_schedule(durations: Sequence[float], slots: int) -> tuple[list[float], list[int]]:
    """Start time (from the stage's start) and slot of each job, FIFO on `slots` slots."""
    n = len(durations)
    if n <= slots:
        return [0.0] * n, list(range(n))
    starts: list[float] = []
    slot_of: list[int] = []
    free_at = [(0.0, slot) for slot in range(slots)]  # sorted, hence already a heap
    for duration in durations:
        start, slot = free_at[0]
        starts.append(start)
        slot_of.append(slot)
        heapq.heapreplace(free_at, (start + duration, slot))
    return starts, slot_of


def makespan(durations: Sequence[float], slots: int) -> float:
    """How long a stage of these jobs lasts on `slots` slots (list_schedule's last end).

    The simulator's hot path: it needs only the length, not who ran where.
    """
    if len(durations) <= slots:
        return max(durations, default=0.0)
    free_at = [0.0] * slots  # when each slot frees up; all equal, hence a heap
    for duration in durations:
        heapq.heapreplace(free_at, free_at[0] + duration)
    return max(free_at)
