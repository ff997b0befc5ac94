"""Stage scheduling: a stage's jobs list-scheduled onto a pool of identical slots.

Inside one gepa stage every job is released at once (the stage starts after a
barrier), so a FIFO queue in front of `slots` workers is exactly list
scheduling in release order: each job starts on the slot that frees first.
Doing it in one step with a heap replaces a SimPy process per rollout.
"""

from __future__ import annotations

import heapq

import numpy as np


def list_schedule(durations: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Start time (from the stage's start) and slot of each job, FIFO on `slots` slots."""
    n = len(durations)
    if n <= slots:
        return np.zeros(n), np.arange(n)
    starts = np.empty(n)
    slot_of = np.empty(n, dtype=np.int64)
    free_at = [(0.0, slot) for slot in range(slots)]  # sorted, hence already a heap
    for job, duration in enumerate(durations.tolist()):
        start, slot = free_at[0]
        starts[job] = start
        slot_of[job] = slot
        heapq.heapreplace(free_at, (start + duration, slot))
    return starts, slot_of


def makespan(durations: np.ndarray, slots: int) -> float:
    """How long a stage of these jobs lasts on `slots` slots."""
    if len(durations) == 0:
        return 0.0
    if len(durations) <= slots:
        return float(durations.max())
    starts, _ = list_schedule(durations, slots)
    return float((starts + durations).max())
