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


class Bucket:
    """One provider limit as a token bucket: `per_minute` of something (requests, tokens).

    It holds `burst_seconds` worth of its allowance (the capacity), starts full
    and refills continuously at per_minute / 60 a second. A call that needs
    more than the capacity waits for a full bucket and takes it below zero, so
    an oversized call is slow but never stuck. Times are seconds since the run
    started; the state lives for the whole run, across stages.
    """

    __slots__ = ("capacity", "level", "rate", "time")

    def __init__(self, per_minute: float, burst_seconds: float):
        self.rate = per_minute / 60.0
        self.capacity = per_minute * burst_seconds / 60.0
        self.level = self.capacity  # as of `time`
        self.time = 0.0

    def ready(self, amount: float, not_before: float) -> float:
        """The earliest time, at or after `not_before` and the last payment, it can pay."""
        now = max(not_before, self.time)
        need = min(amount, self.capacity)
        level = min(self.capacity, self.level + self.rate * (now - self.time))
        return now if level >= need else now + (need - level) / self.rate

    def pay(self, amount: float, at: float) -> None:
        self.level = min(self.capacity, self.level + self.rate * (at - self.time)) - amount
        self.time = at


def rate_limited_schedule(
    durations: Sequence[float],
    slots: int,
    start: float,
    charges: Sequence[tuple[Bucket, Sequence[float]]],
) -> tuple[list[float], list[int], int]:
    """list_schedule with provider limits: absolute start times, slots, throttled calls.

    The stage starts at `start` (seconds since the run started). Each call
    takes the slot that frees first, in order, and starts when that slot is
    free and every bucket in `charges` can pay the call's amount (its entry in
    the paired sequence: 1 for a request, its tokens for a token limit); the
    buckets are paid at that moment. Calls start in order: one waiting for
    capacity holds up those behind it, as a client queueing on its 429s does.
    A call is throttled when it starts later than its slot was free. The
    buckets are updated in place.
    """
    starts: list[float] = []
    slot_of: list[int] = []
    throttled = 0
    free_at = [(start, slot) for slot in range(slots)]  # sorted, hence already a heap
    for i, duration in enumerate(durations):
        free, slot = free_at[0]
        begin = free
        for bucket, amounts in charges:
            begin = max(begin, bucket.ready(amounts[i], free))
        for bucket, amounts in charges:
            bucket.pay(amounts[i], begin)
        if begin > free:
            throttled += 1
        starts.append(begin)
        slot_of.append(slot)
        heapq.heapreplace(free_at, (begin + duration, slot))
    return starts, slot_of, throttled
