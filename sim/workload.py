"""How much work a prediction is, known before it starts: refuse the absurd, time the rest.

A replicate is taken to cost `per_iteration` seconds for each gepa iteration
plus `per_call` for each call it simulates (metric calls and reflections).
Both are measured on this machine, for the scenario at hand, by two short
replicates: a single (1x1) run of many small iterations, and a run of large
stages. A replicate of shape k = P x N runs about (B - V) / (2 k b + s V)
iterations, s the children validated per iteration (k a0, at most the
selection's limit), and simulates its B metric calls plus k reflections per
iteration. A process's memory peaks with its largest stage (k b or s V calls
of BYTES_PER_CALL each), and every replicate's summary is held to the end.
Estimates within a small factor, made to refuse work that could never finish
here and to say how long the rest takes.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once

BYTES_PER_CALL = 400  # a call of a stage in flight, measured at 4k-16k proposals an iteration
BYTES_PER_SUMMARY = 1000  # a replicate's RunSummary, held by the parent process
MAX_SECONDS = 24 * 3600  # wall-clock above which work is refused rather than started
MEMORY_SHARE = 0.8  # of the memory available now that the work may plan to take
SMALL_ITERATIONS = 40  # iterations of the timing run of small stages
LARGE_SHAPE = Shape(16, 16)  # the timing run of large stages
LARGE_ITERATIONS = 2


@dataclass(frozen=True)
class Cost:
    """Seconds a replicate of a scenario takes on this machine, per iteration and per call."""

    per_iteration: float
    per_call: float
    acceptance: float  # of the timing run's proposals (the quality model has no a0 to read)

    @classmethod
    def measured(cls, scenario: Scenario) -> Cost:
        """Timed on two short replicates (tens of milliseconds), after one to warm up."""
        b, v = scenario.minibatch, scenario.valset_size
        short = scenario.replace(budget=v + 1)
        simulate_once(short, Shape(1, 1), 0)  # first calls import and build what later reuse
        small_seconds, small = timed(
            scenario.replace(budget=v + SMALL_ITERATIONS * (2 * b + v)), Shape(1, 1)
        )
        large_seconds, large = timed(
            scenario.replace(budget=v + LARGE_ITERATIONS * 2 * LARGE_SHAPE.k * b), LARGE_SHAPE
        )
        per_call = large_seconds / max(large.metric_calls + large.proposals, 1)
        small_calls = small.metric_calls + small.proposals
        per_iteration = max(small_seconds - small_calls * per_call, 0.0) / max(small.iterations, 1)
        return cls(per_iteration, per_call, small.accepted / max(small.proposals, 1))


def timed(scenario: Scenario, shape: Shape):
    started = time.perf_counter()
    summary = simulate_once(scenario, shape, 0)
    return time.perf_counter() - started, summary


@dataclass(frozen=True)
class Replicate:
    """The expected size of one replicate of a shape on a scenario."""

    iterations: float
    calls: float  # metric calls and reflections simulated
    largest_stage: float  # calls in the largest stage

    @classmethod
    def of(cls, scenario: Scenario, shape: Shape, acceptance: float) -> Replicate:
        """`acceptance`: the share of proposals accepted, where the scenario has no a0."""
        k, b, v = shape.k, scenario.minibatch, scenario.valset_size
        limit = scenario.selection.limit
        if scenario.acceptance is not None:
            acceptance = scenario.acceptance.for_width(k).a0
        validated = min(k * acceptance, limit if limit is not None else k)
        per_iteration = 2 * k * b + validated * v
        iterations = max(1.0, math.ceil(max(scenario.budget - v, 0) / per_iteration))
        calls = v + iterations * (per_iteration + k)
        return cls(iterations, calls, max(k * b, validated * v))


@dataclass(frozen=True)
class Work:
    """What a prediction will cost: time on one core, and memory."""

    replicates: int
    seconds: float  # on one core
    largest_stage: float  # calls, in the largest stage any replicate runs
    held_bytes: float  # the summaries held until the end

    def wall_seconds(self, processes: int) -> float:
        return self.seconds / max(1, min(processes, self.replicates))

    def peak_bytes(self, processes: int) -> float:
        return min(processes, self.replicates) * self.largest_stage * BYTES_PER_CALL + (
            self.held_bytes
        )


def estimate(runs: Sequence[tuple[Scenario, Shape, int]], cost: Cost) -> Work:
    """The work of `runs`: (scenario, shape, replicates) each, at `cost`."""
    seconds, largest, replicates = 0.0, 0.0, 0
    for scenario, shape, count in runs:
        one = Replicate.of(scenario, shape, cost.acceptance)
        seconds += count * (one.iterations * cost.per_iteration + one.calls * cost.per_call)
        largest = max(largest, one.largest_stage)
        replicates += count
    return Work(replicates, seconds, largest, replicates * BYTES_PER_SUMMARY)


def check_work(work: Work, processes: int | None, what: str, smaller: str) -> None:
    """Refuse `work` (a `what`: "this sweep") that would outlast MAX_SECONDS on `processes`
    or outgrow the memory here, saying what it would need; `smaller` says what to ask for
    less of. `processes` None: a cluster's, of unknown size: its memory alone is judged,
    a process's stage on a node taken as here."""
    on = "" if processes is None else f" on {processes} process{'es' if processes > 1 else ''}"
    needed = work.peak_bytes(processes or 1)
    if needed > MEMORY_SHARE * available_memory():
        raise PxnError(
            f"{what} would need ~{roughly_bytes(needed)} of memory{on} "
            f"(this machine has {roughly_bytes(available_memory())} free): {smaller}"
        )
    if processes is not None and work.wall_seconds(processes) > MAX_SECONDS:
        raise PxnError(
            f"{what} would take {roughly(work.wall_seconds(processes))}{on} "
            f"({work.replicates:,} replicates; at most {roughly(MAX_SECONDS)} is started): "
            f"{smaller}"
        )


def available_memory() -> float:
    """Bytes this machine can give now (MemAvailable), else its physical memory."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def roughly(seconds: float) -> str:
    """A duration as a person would guess it: ~40 s, ~3 min, ~5 h, ~3 days, ~20 years."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"~{seconds / size:,.0f} {unit}"
    return f"~{max(seconds, 1):.0f} s"


def roughly_bytes(count: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if count >= size:
            return f"{count / size:,.0f} {unit}"
    return f"{count / 1e3:,.0f} kB"
