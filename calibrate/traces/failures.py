"""The [failures] table from the traces: how often proposals are lost before gepa judges them.

pxn.failures says what the chances mean. Per iteration (the unit the draws resample):
the tasks that reached their reflective dataset and those lost there (no_proposal
`reflective_dataset`, `no_trajectories`); and its reflection calls in gepa's passes
(sorted by start, a task's proposal id coming again opens the second pass): a call of a
task whose first-pass call failed is a retry, any other a first try. `retry` is absent
where no retry ran. A trace before schema 3 has no no_proposal events: `dataset` is 0
and a note says so. A reflection that returned no new text is not a failed call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pxn.failures import Failures
from pxn.shape import Shape
from pxn.trace import BEFORE_REFLECTION, Iteration, Merge, NoProposal, Reflection
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

# The per-iteration counts, the columns of Units.losses.
COUNTS = ("reached", "dataset_lost", "first_tries", "first_failed", "retries", "retry_failed")


@dataclass(frozen=True)
class FailuresFit:
    """The shares the traces show, and what they were counted from."""

    failures: Failures
    counts: dict[str, int]  # COUNTS summed over the traces
    unseen: list[str]  # traces that cannot show losses before the reflection (schema < 3)


def reflective_iterations(trace: Trace) -> set[int]:
    """The iterations that completed, but for those a merge took."""
    return {i.iteration for i in trace.of(Iteration)} - {m.iteration for m in trace.live(Merge)}


def iteration_counts(trace: Trace) -> dict[int, np.ndarray]:
    """Each reflective iteration's COUNTS."""
    done = reflective_iterations(trace)
    k = Shape.parse(trace.run_start.shape).k
    counts = {iteration: np.r_[k, np.zeros(len(COUNTS) - 1)] for iteration in done}
    for event in trace.live(NoProposal):
        if event.iteration in done:
            counts[event.iteration][0] -= event.reason == "perfect_parent"
            counts[event.iteration][1] += event.reason in BEFORE_REFLECTION
    by_iteration: dict[int, list[Reflection]] = {}
    for r in trace.live(Reflection):
        if r.iteration in done:
            by_iteration.setdefault(r.iteration, []).append(r)
    for iteration, calls in by_iteration.items():
        counts[iteration][2:] = pass_counts(sorted(calls, key=lambda r: r.start))
    return counts


def pass_counts(calls: list[Reflection]) -> tuple[int, int, int, int]:
    """(first tries, failed, retries, failed) of one iteration's reflections in start order."""
    seen: set[str] = set()
    failed_first: set[str] = set()
    first = first_failed = retries = retry_failed = 0
    second_pass = False
    for call in calls:
        second_pass = second_pass or call.proposal in seen
        failed = call.error is not None
        if second_pass and call.proposal in failed_first:
            retries += 1
            retry_failed += failed
        else:
            first += 1
            first_failed += failed
            if failed and not second_pass:
                failed_first.add(call.proposal)
        seen.add(call.proposal)
    return first, first_failed, retries, retry_failed


def shares(counts: np.ndarray) -> Failures:
    """The shares of summed COUNTS (a row)."""
    reached, dataset_lost, first, first_failed, retries, retry_failed = counts.tolist()
    return Failures(
        dataset=dataset_lost / reached if reached else 0.0,
        reflection=first_failed / first if first else 0.0,
        retry=retry_failed / retries if retries else None,
    )


def fit_failures(traces: list[Trace], losses: np.ndarray) -> FailuresFit:
    """From the units' COUNTS (a row per unit)."""
    total = losses.sum(axis=0) if len(losses) else np.zeros(len(COUNTS))
    unseen = [str(t.path) for t in traces if t.run_start.schema < 3]
    counts = dict(zip(COUNTS, (int(x) for x in total), strict=True))
    return FailuresFit(shares(total), counts, unseen)


def draw_failures(resample: Resample) -> dict[str, float]:
    """A parameter draw's [failures], refitted to resampled units (nothing where the point
    estimate loses nothing: a scenario without losses keeps drawing none)."""
    point = resample.scenario.failures
    if not point.any:
        return {}
    refitted = shares(resample.units.losses.sum(axis=0))
    draw = {"failures.dataset": refitted.dataset, "failures.reflection": refitted.reflection}
    if point.retry is not None:
        draw["failures.retry"] = refitted.retry_failure
    return draw


def failure_lines(cal: Calibration) -> list[str]:
    """The proposals the runs lost before gepa judged them, and the [failures] shares."""
    c, f, unseen = cal.failures.counts, cal.failures.failures, cal.failures.unseen
    chosen = (
        ", ".join(f"failures.{name}={value:.3g}" for name, value in f.to_dict().items())
        if f.any
        else "no [failures] table: no proposal was lost"
    )
    if not c["reached"] and not c["first_tries"]:
        seen = ["proposals lost: none could be seen (no task reached its reflection)"]
        return [*seen, f"  -> {chosen}"]
    retries = (
        f", {c['retry_failed']} of {c['retries']} retries of a failed one ({f.retry_failure:.0%})"
        if c["retries"]
        else ""
    )
    lines = [
        f"proposals lost before their reflection: {c['dataset_lost']} of {c['reached']} "
        f"tasks ({f.dataset:.0%}; the adapter built no reflective dataset)",
        f"reflection calls that gave no text: {c['first_failed']} of {c['first_tries']} "
        f"first tries ({f.reflection:.0%}){retries}",
    ]
    if unseen:
        lines.append(
            f"{len(unseen)} trace(s) predate the no_proposal event (schema 3): their "
            "tasks lost before a reflection count as skipped there"
        )
    return [*lines, f"  -> {chosen}"]
