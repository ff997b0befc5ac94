"""The trace's totals against gepa's own: the runner's proof that it missed nothing.

Checked at the end of every recorded run, over the whole run however often it
was resumed (a mismatch is named in run_end's result and in a warning), and
asserted by the integration tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pxn.trace import Decision, Iteration, Rollout, Trace


def max_concurrency(rollouts: Sequence[Rollout]) -> int:
    """The most rollouts in flight at once (an end at t frees its slot before a start at t)."""
    edges = sorted([(r.start, 1) for r in rollouts] + [(r.end, -1) for r in rollouts])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


@dataclass(frozen=True)
class Totals:
    metric_calls: int
    full_val_evals: int  # the seed's validation plus each full validation of a child
    accepted: int
    iterations: int
    proposals: int
    max_concurrent: int


def counted_rollouts(trace: Trace) -> list[Rollout]:
    """The rollouts gepa counted: without the work a resume threw away (Trace.live)."""
    return trace.live(Rollout)


def trace_totals(trace: Trace) -> Totals:
    events = trace.events
    rollouts = counted_rollouts(trace)
    seed = any(r.phase == "seed_val" for r in rollouts)
    full = {(r.iteration, r.candidate) for r in rollouts if r.phase == "full_val"}
    all_rollouts = [e for e in events if isinstance(e, Rollout)]
    decisions = trace.live(Decision)
    return Totals(
        metric_calls=len(rollouts),
        full_val_evals=int(seed) + len(full),
        accepted=sum(1 for d in decisions if d.accepted),
        iterations=len(trace.live(Iteration)),
        proposals=len(decisions),
        max_concurrent=max_concurrency(all_rollouts),
    )


def mismatches(
    totals: Totals,
    *,
    metric_calls: int,
    full_val_evals: int,
    accepted: int,
    iterations: int,
    workers: int | None,
) -> list[str]:
    """Each failed invariant as one line; empty when the trace agrees with gepa (and, when W
    was declared, no more rollouts ran at once than W)."""
    problems = []
    if totals.metric_calls != metric_calls:
        problems.append(
            f"trace has {totals.metric_calls} metric calls, gepa counted {metric_calls}"
        )
    if totals.full_val_evals != full_val_evals:
        problems.append(
            f"trace has {totals.full_val_evals} full validations, gepa counted {full_val_evals}"
        )
    if totals.accepted != accepted:
        problems.append(f"trace has {totals.accepted} accepted proposals, gepa added {accepted}")
    if totals.iterations != iterations:
        problems.append(f"trace has {totals.iterations} iterations, gepa ran {iterations}")
    if workers is not None and totals.max_concurrent > workers:
        problems.append(f"{totals.max_concurrent} rollouts ran at once with only {workers} workers")
    return problems
