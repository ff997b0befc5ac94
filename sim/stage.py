"""One stage between two barriers, for rollouts and reflections alike.

A stage is gepa's own work (the scenario's stage_overhead), then n calls of
one model released at once, then the barrier. Its pipeline: draw each call's
latency (latency.py), load it, schedule the calls on the stage's slots,
account for what they use (accounting.py), trace them (tracing.py). The
stage costs one SimPy timeout: its calls are list-scheduled in one step
(schedule.py) instead of a process each.

The schedule (each call slowed by its model's calls in flight at its start,
Load.factor): loaded_makespan without provider limits; rate_limited_schedule
with them, unless the stage fits its slots and its buckets hold its whole
ask at its start (ModelAccount.pay_at_start: none of its calls waits);
cached_makespan for reflections on servers that keep their last prompt
(Load.prefix_seconds); split_schedule for rollouts on workers split among a
stage's candidates (worker_split = "per_candidate", as dspy.GEPA's
batch_evaluate runs every stage but the seed's validation, which gepa
evaluates through the adapter's own evaluate, on all W).
"""

from __future__ import annotations

from operator import add

import numpy as np
import simpy

from pxn.sim.accounting import ModelAccount
from pxn.sim.latency import CallLatency, CandidateLengths
from pxn.sim.schedule import (
    cached_makespan,
    list_schedule,
    loaded_makespan,
    rate_limited_schedule,
    split_schedule,
    together,
)
from pxn.sim.tracing import Items, NoTrace


def total(seconds: list[float] | np.ndarray) -> float:
    """The sum numpy gives for these values (a list, or a stage's array), to the bit.

    numpy sums 8 or more values pairwise, fewer in one running sum as Python
    does; matching it keeps results identical to those first computed with
    numpy arrays (the committed predictions reproduce from their seeds). A
    list of up to 128 is summed here as numpy would (numpy's conversion of a
    short list costs more than the sum).
    """
    n = len(seconds)
    if n < 8:
        return sum(seconds)
    if n > PAIRWISE_BLOCK or isinstance(seconds, np.ndarray):
        return float(np.add.reduce(seconds))
    # numpy's pairwise_sum for 8 <= n <= 128: eight running sums over the whole
    # blocks of eight, added as a tree, then the rest one by one.
    r0, r1, r2, r3, r4, r5, r6, r7 = seconds[:8]
    whole = n - n % 8
    for i in range(8, whole, 8):
        r0 += seconds[i]
        r1 += seconds[i + 1]
        r2 += seconds[i + 2]
        r3 += seconds[i + 3]
        r4 += seconds[i + 4]
        r5 += seconds[i + 5]
        r6 += seconds[i + 6]
        r7 += seconds[i + 7]
    result = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for value in seconds[whole:]:
        result += value
    return result


PAIRWISE_BLOCK = 128  # numpy sums up to this many in one pass of eight running sums


# From this many calls starting together, a stage's lengths are computed with numpy
# (its draws are an array): a numpy operation costs ~1 us whatever its size, more
# than a few calls' Python arithmetic and far less than a validation's hundreds.
MANY = 32


class CallStage:
    """The stages of one model's calls over a run: rollouts (task) or reflections."""

    def __init__(
        self,
        env: simpy.Environment,
        role: str,
        latency: CallLatency,
        overhead: float,
        account: ModelAccount,
        trace: NoTrace,
        split_workers: int | None = None,
        lengths: CandidateLengths | None = None,
    ):
        """`split_workers`: W, when a stage's workers are split among its candidates;
        `lengths`: the candidates' prompt lengths, when they scale these calls."""
        self.env = env
        self.role = role
        self.latency = latency
        self.slots = latency.slots
        self.overhead = overhead
        self.account = account
        self.limited = account.limited
        self.slowdown = latency.load.slowdown
        self.prefix_seconds = latency.load.prefix_seconds
        self.split_workers = split_workers
        self.lengths = lengths
        # Each call's tokens are needed by a tokens-per-minute limit, or to trace them.
        self.per_call_tokens = account.per_call or trace.enabled
        self.trace = trace
        self.busy = 0.0  # seconds spent in these calls, summed over calls
        self.time: dict[str, float] = {}  # seconds per stage name, barrier to barrier
        self.overhead_time = 0.0  # gepa's own work before the stages

    def run(
        self,
        iteration: int,
        name: str,
        items: Items,
        per_item: int = 1,
        scores: list[float] | None = None,
        errors: list[bool] | None = None,
        one_at_a_time: bool = False,
    ) -> simpy.Timeout:
        """One stage of `per_item` calls per item (a candidate on its examples, a reflection).

        Its calls are scheduled and accounted for at once; what it returns is the
        timeout the iteration waits on until the stage's barrier. `scores`, one per
        call, are the rollouts' (the quality model's), `errors` which calls failed, for
        the trace. `one_at_a_time`: the calls run one after another, straight after the
        stage before (gepa's second pass of reflections, in the same stage).
        """
        n = len(items) * per_item
        draws = self.latency.draw(name, n)
        if self.lengths is not None:  # each item's calls at its candidate's prompt length
            draws = draws * np.repeat(self.lengths.factors([owner for owner, _ in items]), per_item)
        account = self.account
        tokens = account.draw(n, self.per_call_tokens)
        overhead = 0.0 if one_at_a_time else self.overhead
        start = self.env.now + overhead
        slots = 1 if one_at_a_time else self.slots
        waits = self.limited and not (n <= slots and account.pay_at_start(n, tokens, start))
        split = self.split_workers is not None and name != "seed_val"
        timed = waits or split  # scheduled call by call: timed from the calls' ends
        if timed:  # calls pay their buckets as they start; split: each on its candidate's threads
            charges = account.charges(tokens) if waits else []
            if split:  # each candidate on its share of the workers
                starts, slot_of, durations, throttled = split_schedule(
                    draws.tolist(), per_item, self.split_workers, self.latency.load.servers,
                    self.slowdown, start, charges,
                )  # fmt: skip
            else:
                starts, slot_of, durations, throttled = rate_limited_schedule(
                    draws.tolist(), slots, start, charges, self.slowdown
                )
            account.throttled_calls += throttled
            length = max(map(add, starts, durations), default=start) - start
        elif MANY <= n <= slots:  # many calls, all starting with the stage
            durations, length = together(draws, self.slowdown)
        elif self.prefix_seconds and n > slots:  # siblings may follow each other on a server
            owners = [owner for _, owner in items]
            durations, length = cached_makespan(
                draws.tolist(), owners, slots, self.slowdown, self.prefix_seconds
            )
        else:  # every call starts with the stage, or when a slot frees
            durations, length = loaded_makespan(draws.tolist(), slots, self.slowdown)
        if self.limited and not timed:  # timed from the calls' ends, as when they may wait
            length = (start + length) - start
        delay = overhead + length
        self.busy += total(durations)
        self.time[name] = self.time.get(name, 0.0) + length
        self.overhead_time += overhead
        if self.trace.enabled:
            if isinstance(durations, np.ndarray):  # the trace writes Python floats
                durations = durations.tolist()
            if not timed:
                offsets, slot_of = list_schedule(durations, slots)
                starts = [start + offset for offset in offsets]
            self.trace.calls(
                self.role, iteration, name, starts, durations, slot_of, items, tokens, scores,
                errors,
            )  # fmt: skip
            # The barrier: the time SimPy gives the timeout's end (now + delay).
            self.trace.stage(iteration, name, start, self.env.now + delay)
        return self.env.timeout(delay)
