"""Stage scheduling: a stage's jobs list-scheduled onto a pool of identical slots.

Inside one gepa stage every job is released at once (the stage starts after a
barrier), so a FIFO queue in front of `slots` workers is exactly list
scheduling in release order: each job starts on the slot that frees first.
Doing it in one step with a heap replaces a SimPy process per rollout.

A model slowed by load stretches each call by the calls in flight at its
start (loaded_makespan; under provider limits rate_limited_schedule, which
also holds a call until its token buckets can pay for it).

Stages are small (a few to a few hundred jobs), so the loops work on plain
Python lists: at that size numpy's per-call overhead costs more than the
loop. The one step without a loop, calls that all start at once (together),
takes a numpy array: the stage uses it when they are many.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from itertools import islice, repeat

import numpy as np


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
        return max(durations) if durations else 0.0  # (max's default= costs 3x more)
    free_at = [0.0] * slots  # when each slot frees up; all equal, hence a heap
    for duration in durations:
        heapq.heapreplace(free_at, free_at[0] + duration)
    return max(free_at)


def loaded_makespan(draws: list[float], slots: int, slowdown: float) -> tuple[list[float], float]:
    """The calls' lengths under load, and the stage's length, on `slots` slots.

    A call takes 1 + slowdown (m - 1) times its draw, m being the calls in flight
    at its start (itself and those starting with it included). While at least
    `slots` calls wait, a call starts when another ends and the rest still run:
    m = min(n, slots). Only when several slots free at one instant (equal ends:
    discrete latencies) and fewer calls wait than were freed do the last calls
    start among fewer; then they all start at once and count each other.
    Without a slowdown the lengths are the draws (the same list).
    """
    n = len(draws)
    if not slowdown:
        return draws, makespan(draws, slots)
    factor = 1 + slowdown * (min(n, slots) - 1)
    durations = [d * factor for d in draws]
    if n <= slots:
        return durations, max(durations) if durations else 0.0
    # The first `slots` calls start together at 0; each later one when a slot frees.
    free_at = durations[:slots]
    heapq.heapify(free_at)
    heapreplace = heapq.heapreplace
    for call in range(slots, n):
        now = free_at[0]
        waiting = n - call
        # A tie with the next slot to free: count them (discrete latencies only).
        if waiting < slots and now in free_at[1:3]:
            freed = sum(1 for t in free_at if t == now)
            if freed > waiting:  # the rest start together among the slots still busy
                late = 1 + slowdown * (slots - freed + waiting - 1)
                for last in range(call, n):
                    durations[last] = draws[last] * late
                    heapreplace(free_at, now + durations[last])
                break
        heapreplace(free_at, now + durations[call])
    return durations, max(free_at)


def cached_makespan(
    draws: list[float], owners: Sequence[str], slots: int, slowdown: float, saving: float
) -> tuple[list[float], float]:
    """loaded_makespan on servers that keep the prompt they served last.

    Each slot is a server. A call that a server takes right after a call of
    the same owner (a reflection's parent: the two prompts share its text)
    is its draw less `saving`, floored at 0, before the load factor. A
    server's first call of the stage follows other work (rollouts) and saves
    nothing. Calls take the server that frees first, ties to the lower
    server, as list_schedule assigns them, so a trace's slots are the
    servers used here. The load factor is min(n, slots) for every call: the
    drain's equal-ends case of loaded_makespan is not distinguished.
    """
    n = len(draws)
    factor = 1 + slowdown * (min(n, slots) - 1)
    if n <= slots:
        durations = [d * factor for d in draws]
        return durations, max(durations) if durations else 0.0
    durations = []
    last_owner: list[str | None] = [None] * slots
    free_at = [(0.0, slot) for slot in range(slots)]  # sorted, hence already a heap
    for draw, owner in zip(draws, owners, strict=True):
        now, slot = free_at[0]
        if last_owner[slot] == owner:
            draw = max(0.0, draw - saving)
        last_owner[slot] = owner
        durations.append(draw * factor)
        heapq.heapreplace(free_at, (now + durations[-1], slot))
    return durations, max(end for end, _ in free_at)


def thread_shares(items: int, workers: int) -> tuple[int, list[int]]:
    """DSPy's split of W workers among a stage's candidates (dspy.GEPA's batch_evaluate):
    min(items, W) candidates run at once, each on W // that many threads, the first
    W mod that many one more; a candidate waits for one of those places to free."""
    at_once = max(1, min(items, workers))
    each, extra = divmod(workers, at_once)
    return at_once, [each + (i < extra) for i in range(items)]


def split_schedule(
    draws: Sequence[float],
    per_item: int,
    workers: int,
    servers: int | None,
    slowdown: float,
    start: float = 0.0,
    charges: Sequence[tuple[Bucket, Sequence[float] | float]] = (),
) -> tuple[list[float], list[int], list[float], int]:
    """A stage whose W workers are split among its candidates: starts, threads, lengths,
    throttled calls.

    The calls are `per_item` consecutive ones per candidate (its examples)
    and the stage starts at `start`. A candidate's calls take its own threads
    (thread_shares) in order; its place goes to the next candidate when its
    last call ends. With `servers`, a call holding a thread also needs a
    server (FIFO, in the order calls became ready); with `charges` (as for
    rate_limited_schedule) it then waits in line until every bucket can pay
    it, throttled if that is later than it got both. A call takes
    1 + slowdown (m - 1) times its draw, m the calls in flight at its start,
    those starting with it included. A thread of a candidate whose calls are
    all under way idles, as DSPy's does (in a pooled stage any free worker
    takes the next call).
    """
    n = len(draws)
    items = n // per_item
    places = _Places(items, workers)
    idle = places.idle  # candidate -> its threads not serving a call
    capacity = math.inf if servers is None else servers
    asks = [(bucket, list(islice(_per_call(amount, n), n))) for bucket, amount in charges]
    starts = [start] * n
    slot_of = [0] * n
    durations = list(draws)
    next_call = [i * per_item for i in range(items)]  # each candidate's next call to start
    ready: list[tuple[int, int]] = []  # (call, thread) holding a thread, waiting for a server
    line: list[tuple[int, int, float]] = []  # (call, thread, since) holding both, to be paid
    head_at = math.inf  # when the buckets can pay the first call in line
    ends: list[tuple[float, int]] = []  # (end, call) of the calls in flight, a heap
    left = [per_item] * items  # calls of each candidate not yet ended
    serving = 0
    throttled = 0
    now = start
    while True:
        for item in sorted(idle):  # each candidate's free threads take its next calls
            free = idle[item]
            while free and next_call[item] < (item + 1) * per_item:
                ready.append((next_call[item], free.pop()))
                next_call[item] += 1
        while ready and serving + len(line) < capacity:  # a server each, in turn
            call, thread = ready.pop(0)
            line.append((call, thread, now))
            if len(line) == 1:
                head_at = _payable_at(asks, call, now)
        starting = []
        while line and head_at <= now:  # the buckets pay the line's head, then the next
            call, thread, since = line.pop(0)
            for bucket, paid in asks:
                bucket.pay(paid[call], now)
            throttled += int(now > since)
            starting.append((call, thread))
            head_at = _payable_at(asks, line[0][0], now) if line else math.inf
        serving += len(starting)
        factor = 1 + slowdown * (serving - 1)
        for call, thread in starting:
            starts[call], slot_of[call] = now, thread
            durations[call] = draws[call] * factor
            heapq.heappush(ends, (now + durations[call], call))
        if not ends and not line:
            break
        now = ends[0][0] if ends and ends[0][0] < head_at else head_at
        while ends and ends[0][0] == now:  # every call ending at this instant
            _, call = heapq.heappop(ends)
            serving -= 1
            item = call // per_item
            idle[item].append(slot_of[call])
            left[item] -= 1
            if left[item] == 0:  # the candidate is done: its place goes to the next one
                places.done(item)
    return starts, slot_of, durations, throttled


class _Places:
    """A split stage's places: min(items, W) candidates under way at once, each on its
    share of the threads (thread_shares); the rest wait for a place to free."""

    def __init__(self, items: int, workers: int):
        at_once, self.threads = thread_shares(items, workers)
        # Thread ids: place k's candidate uses ids from the k-th offset; a place keeps its ids.
        self.offsets = [sum(self.threads[:k]) for k in range(at_once)]
        self.place_of = [0] * items
        self.idle: dict[int, list[int]] = {}  # candidate -> its threads not serving a call
        self.waiting = list(range(at_once, items))[::-1]  # candidates for a place, next one last
        for place in range(at_once):
            self.admit(place, place)

    def admit(self, item: int, place: int) -> None:
        self.place_of[item] = place
        first = self.offsets[place]
        self.idle[item] = list(range(first, first + self.threads[item]))[::-1]

    def done(self, item: int) -> None:
        """The candidate's last call ended: its place goes to the next one waiting."""
        del self.idle[item]
        if self.waiting:
            self.admit(self.waiting.pop(), self.place_of[item])


def _payable_at(asks: list[tuple[Bucket, list[float]]], call: int, now: float) -> float:
    """The earliest time at or after `now` that every bucket of `asks` can pay `call`."""
    return max((bucket.payable_at(paid[call], now) for bucket, paid in asks), default=now)


def together(draws: np.ndarray, slowdown: float) -> tuple[np.ndarray, float]:
    """loaded_makespan of calls that all start at once (no more than the slots), in numpy.

    For a stage of many calls, where one numpy operation costs less than a
    Python loop over them; the same numbers as loaded_makespan's.
    """
    durations = draws * (1 + slowdown * (len(draws) - 1)) if slowdown else draws
    return durations, float(durations.max())


class Bucket:
    """One provider limit as a token bucket: `per_minute` of something (requests, tokens).

    It holds `burst_seconds` worth of its allowance (the capacity), starts full
    and refills continuously at per_minute / 60 a second. A call that needs
    more than the capacity waits for a full bucket and takes it below zero, so
    an oversized call is slow but never stuck. Times are seconds since the run
    started; the state lives for the whole run, across stages. rate_limited_schedule
    and pay_at_once spell its methods' arithmetic out inline (calling them
    there cost 5% of a rate-limited replicate).
    """

    __slots__ = ("capacity", "level", "rate", "time")

    def __init__(self, per_minute: float, burst_seconds: float):
        self.rate = per_minute / 60.0
        self.capacity = per_minute * burst_seconds / 60.0
        self.level = self.capacity  # as of `time`
        self.time = 0.0

    def held(self, at: float) -> float:
        """What the bucket holds at `at`, no earlier than its last payment:
        min(capacity, level + rate * (at - time))."""
        held = self.level + self.rate * (at - self.time)
        return self.capacity if self.capacity < held else held

    def payable_at(self, amount: float, after: float) -> float:
        """The earliest time at or after `after` (and its last payment) it can pay
        `amount`: when it holds min(amount, capacity)."""
        now = self.time if self.time > after else after
        held, need = self.held(now), min(amount, self.capacity)
        return now if held >= need else now + (need - held) / self.rate

    def pay(self, amount: float, at: float) -> None:
        self.level, self.time = self.held(at) - amount, at


def rate_limited_schedule(
    draws: Sequence[float],
    slots: int,
    start: float,
    charges: Sequence[tuple[Bucket, Sequence[float] | float]],
    slowdown: float = 0.0,
) -> tuple[list[float], list[int], list[float], int]:
    """list_schedule with provider limits: absolute starts, slots, durations, throttled calls.

    The stage starts at `start` (seconds since the run started). Each call
    takes the slot that frees first, in order, and starts when that slot is
    free and every bucket in `charges` (at most two) can pay the call's amount
    (its entry in the paired sequence, or the one number for every call: 1 for
    a request, its tokens for a token limit), paying it then. Calls start in
    order: one waiting for capacity holds up those behind it (holding its
    slot), as a client queueing on its 429s does. A call is throttled when it
    starts later than its slot was free. The buckets are updated in place.

    With a load `slowdown` beta a call takes 1 + beta (m - 1) times its draw,
    m the calls in flight at its start, every call starting at that instant
    included (so a stage never throttled gets the unlimited model's
    min(n, slots)). The calls starting at one instant form an open group,
    their lengths fixed when the next call starts later; they hold their
    slots meanwhile. Without a slowdown the durations are the draws (the same list).

    The hot path of a rate-limited scenario, so written for speed: the
    buckets' state in local variables (a missing one never waits), min and
    max spelt as the builtins' comparisons (the same floats), the slots
    never used kept out of the heap. A stage that fits its slots and whose
    whole ask the buckets hold at its start is paid in one go (pay_at_once).
    """
    if len(charges) > 2:
        raise ValueError(f"at most two buckets per call, not {len(charges)}")
    (bucket_a, amounts_a), (bucket_b, amounts_b) = [*charges, (None, 0.0), (None, 0.0)][:2]
    n = len(draws)
    asks = ((bucket, stage_ask(amounts, n)) for bucket, amounts in charges)
    if n <= slots and pay_at_once(asks, start):  # nothing waits: all start now
        factor = 1 + slowdown * (n - 1)
        return [start] * n, list(range(n)), [d * factor for d in draws] if slowdown else draws, 0
    # strict=False: a repeated amount never ends; _per_call checks a sequence's length.
    per_call = zip(range(n), _per_call(amounts_a, n), _per_call(amounts_b, n), strict=False)
    starts, slot_of, durations, throttled, paid_a, paid_b = _start_in_order(
        draws, slots, start, per_call, _state(bucket_a, start), _state(bucket_b, start), slowdown
    )
    for bucket, (level, time) in ((bucket_a, paid_a), (bucket_b, paid_b)):
        if bucket is not None:
            bucket.level, bucket.time = level, time
    return starts, slot_of, durations, throttled


def _start_in_order(
    draws: Sequence[float],
    slots: int,
    start: float,
    per_call: Iterable[tuple[int, float, float]],
    bucket_a: tuple[float, float, float, float],
    bucket_b: tuple[float, float, float, float],
    slowdown: float,
) -> tuple[list[float], list[int], list[float], int, tuple[float, float], tuple[float, float]]:
    """rate_limited_schedule's loop over the calls (call, amount a, amount b): its schedule,
    and each bucket's (level, time) after it; a bucket is given as _state gives it."""
    rate_a, cap_a, level_a, time_a = bucket_a
    rate_b, cap_b, level_b, time_b = bucket_b
    starts: list[float] = []
    slot_of: list[int] = []
    durations = list(draws) if slowdown else draws
    throttled = 0
    # (free at, slot) of the slots used so far and not held by the open group, a
    # heap; slots `fresh` and up are free at `start`. A used slot frees no earlier
    # than `start` and is below every fresh one, so it comes first (as in a heap
    # of all the slots) when it frees at `start` too.
    used: list[tuple[float, int]] = []
    fresh = 0
    heappush, heappop = heapq.heappush, heapq.heappop
    group: list[int] = []  # calls starting at `group_start` (slowdown only)
    group_start = start
    running: list[float] = []  # ends of the calls started before the group, a heap
    for call, amount_a, amount_b in per_call:
        while True:
            if fresh < slots and not (used and used[0][0] <= start):
                free, slot, new = start, fresh, True
            elif used:
                (free, slot), new = used[0], False
            else:  # the open group holds every slot: it ends before any frees
                _close_group(group, group_start, slowdown, durations, slot_of, used, running)
                continue
            # Each bucket's earliest time at or after `free` (and its last payment) that it
            # holds min(amount, capacity), written out for a and b: a loop over the buckets
            # here lost most of the speed-up. Bucket a's is never before `free`.
            now_a = time_a if time_a > free else free
            full_a = level_a + rate_a * (now_a - time_a)
            full_a = cap_a if cap_a < full_a else full_a
            need = cap_a if cap_a < amount_a else amount_a
            begin = now_a if full_a >= need else now_a + (need - full_a) / rate_a
            now_b = time_b if time_b > free else free
            full_b = level_b + rate_b * (now_b - time_b)
            full_b = cap_b if cap_b < full_b else full_b
            need = cap_b if cap_b < amount_b else amount_b
            ready = now_b if full_b >= need else now_b + (need - full_b) / rate_b
            begin = ready if ready > begin else begin
            if group and begin != group_start:  # the group is complete: fix its lengths
                _close_group(group, group_start, slowdown, durations, slot_of, used, running)
                continue
            break
        # Pay both at `begin`: refilled to it (already done when it is `now`).
        if begin != now_a:
            full_a = level_a + rate_a * (begin - time_a)
            full_a = cap_a if cap_a < full_a else full_a
        level_a, time_a = full_a - amount_a, begin
        if begin != now_b:
            full_b = level_b + rate_b * (begin - time_b)
            full_b = cap_b if cap_b < full_b else full_b
        level_b, time_b = full_b - amount_b, begin
        if new:
            fresh += 1
        else:
            heappop(used)
        if begin > free:
            throttled += 1
        starts.append(begin)
        slot_of.append(slot)
        if slowdown:
            group.append(call)
            group_start = begin
        else:
            heappush(used, (begin + draws[call], slot))
    if group:
        _close_group(group, group_start, slowdown, durations, slot_of, used, running)
    return starts, slot_of, durations, throttled, (level_a, time_a), (level_b, time_b)


def _close_group(
    group: list[int],
    group_start: float,
    slowdown: float,
    durations: list[float],
    slot_of: list[int],
    used: list[tuple[float, int]],
    running: list[float],
) -> None:
    """Fix the lengths of the open group's calls, all started at `group_start`: each is
    slowed by them and by the calls still `running`; then their slots are `used` again."""
    while running and running[0] <= group_start:
        heapq.heappop(running)
    factor = 1 + slowdown * (len(running) + len(group) - 1)
    for call in group:
        end = group_start + durations[call] * factor
        durations[call] = end - group_start
        heapq.heappush(used, (end, slot_of[call]))
        heapq.heappush(running, end)
    group.clear()


def pay_at_once(asks: Iterable[tuple[Bucket, float]], start: float) -> bool:
    """Pay each bucket its whole ask at `start` if every one then holds it (else pay nothing).

    The asks are a stage's: the sum of what its calls pay each bucket. Then
    no call of a stage that fits its slots waits: each finds at least what is
    left of the stage's ask, which covers its own. The buckets are left as
    the calls, paying one after another at `start`, would leave them (up to
    the rounding of one sum against many differences).
    """
    paid = []
    for bucket, ask in asks:
        held = bucket.level + bucket.rate * (start - bucket.time)
        held = bucket.capacity if bucket.capacity < held else held
        if bucket.time > start or held < ask:
            return False
        paid.append((bucket, held - ask))
    for bucket, level in paid:
        bucket.level, bucket.time = level, start
    return True


def stage_ask(amounts: Sequence[float] | float, calls: int) -> float:
    """What `calls` calls pay a bucket in all: each its amount, or the one number each."""
    return amounts * calls if isinstance(amounts, int | float) else sum(amounts)


def _state(bucket: Bucket | None, start: float) -> tuple[float, float, float, float]:
    """(rate, capacity, level, time) of a bucket; of one that never waits for None."""
    if bucket is None:
        return 0.0, math.inf, math.inf, start
    return bucket.rate, bucket.capacity, bucket.level, bucket.time


def _per_call(amounts: Sequence[float] | float, calls: int) -> Iterable[float]:
    """Each call's amount: the sequence (one per call), or the one number repeated."""
    if isinstance(amounts, int | float):
        return repeat(amounts)
    if len(amounts) != calls:
        raise ValueError(f"{len(amounts)} amounts for {calls} calls")
    return amounts
