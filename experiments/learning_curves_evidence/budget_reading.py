"""A recorded run read at a smaller budget: the run gepa would have made had it been given it.

gepa 0.1.4 checks `max_metric_calls` only at the top of an iteration, and nothing it does
before that check depends on the budget (merges neither: they are scheduled by accepted
proposals, not by calls). So a run to budget L holds the run to any smaller budget B as its
prefix: everything before the first iteration top at which the metric calls spent reach B.
The simulator reads its replicates so (pxn.sim.model, `simulate_budgets`); this reads a
trace so, whether the runner, the recorder or the simulator wrote it.

The metric calls are counted as `pxn.run_summary.summarize` counts them, one per rollout event
(a recorded run's rollouts are checked against gepa's own count when it ends). The prefix
keeps every event of the iterations before that top (the seed's validation is iteration
0) and ends with a run_end at that top: at the start of the first iteration cut away, or
where the run itself ended when no iteration is cut.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from pxn.run_summary import summarize
from pxn.trace import Iteration, Resume, Rollout, RunEnd, RunStart
from pxn.trace_reading import Trace


def calls_before_each_top(trace: Trace) -> list[int]:
    """The metric calls spent before the top of iteration t, at index t - 1, for every
    iteration the trace holds and the top after its last (where the run stopped)."""
    per_iteration = Counter(r.iteration for r in trace.of(Rollout))
    last = max((i.iteration for i in trace.of(Iteration)), default=0)
    spent, before = per_iteration[0], []
    for t in range(1, last + 2):
        before.append(spent)
        spent += per_iteration[t]
    return before


def at_budget(trace: Trace, budget: int) -> Trace:
    """The prefix of `trace` that a run given `budget` metric calls would have been.

    ValueError when the run spent fewer calls than `budget` (it cannot say what a longer
    run does) or was resumed (a resume's thrown-away work would count twice).
    """
    if any(isinstance(e, Resume) for e in trace.events):
        raise ValueError(f"{trace.path}: a resumed run; read it whole")
    before = calls_before_each_top(trace)
    stop = next((t for t, calls in enumerate(before, start=1) if calls >= budget), None)
    if stop is None:
        raise ValueError(
            f"{trace.path}: the run spent {before[-1]} metric calls; it cannot be read at {budget}"
        )
    end = trace.run_end
    # run_start and run_end have no iteration: the one is kept, the other replaced below.
    kept = [e for e in trace.events if e is not end and getattr(e, "iteration", 0) < stop]
    start = kept[0]
    assert isinstance(start, RunStart)
    events = [dataclasses.replace(start, budget=budget), *kept[1:]]
    top = next((i.start for i in trace.of(Iteration) if i.iteration == stop), None)
    if top is None:  # nothing cut: the run ended there
        top = end.end if end is not None else max(e.end for e in kept)
    events.append(
        RunEnd(
            start=top,
            end=top,
            status="completed",
            metric_calls=before[stop - 1],
            iterations=stop - 1,
            message=f"read at a budget of {budget} metric calls",
            workers=None if end is None else end.workers,
        )
    )
    return Trace(trace.path, events, list(trace.skipped))


def best_score_at(trace: Trace, budget: int) -> float | None:
    """The best mean validation score the run would have ended with, given `budget`."""
    return summarize(at_budget(trace, budget)).best_score
