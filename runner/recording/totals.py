"""A recorded run's totals, and the trace's totals against gepa's own: the recorder's proof
that it missed nothing. Only a completed run is checked: cut short, gepa's counts lag the
calls made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepa.core.state import GEPAState

from pxn.errors import PxnError
from pxn.trace import Decision, Iteration, Merge, Reflection, Rollout
from pxn.trace_reading import Trace, max_concurrency, read_trace


@dataclass(frozen=True)
class Totals:
    metric_calls: int
    full_val_evals: int  # the seed's validation plus each full validation of a new candidate
    accepted: int  # proposals accepted
    iterations: int
    proposals: int
    max_concurrent: int  # of the timed rollouts
    untimed_calls: int  # adapter calls with rollouts nothing timed (each spans its call)
    merges: int = 0  # merges gepa judged
    merges_accepted: int = 0


def trace_totals(trace: Trace) -> Totals:
    rollouts = trace.live(Rollout)  # without the work a resume threw away
    seed = any(r.phase == "seed_val" for r in rollouts)
    full = {(r.iteration, r.candidate) for r in rollouts if r.phase == "full_val"}
    all_rollouts = trace.of(Rollout)
    decisions = trace.live(Decision)
    merges = trace.live(Merge)
    return Totals(
        metric_calls=len(rollouts),
        full_val_evals=int(seed) + len(full),
        accepted=sum(1 for d in decisions if d.accepted),
        iterations=len(trace.live(Iteration)),
        proposals=len(decisions),
        max_concurrent=max_concurrency(all_rollouts),
        merges=len(merges),
        merges_accepted=sum(1 for m in merges if m.accepted),
        untimed_calls=len(
            {(r.iteration, r.phase, r.start, r.end) for r in all_rollouts if not r.timed}
        ),
    )


def mismatches(totals: Totals, state: Any, workers: int | None) -> list[str]:
    """Each failed invariant of the trace against gepa's `state` (its GEPAState) as one line;
    empty when they agree (and, when W was declared, no more timed rollouts ran at once than
    W: untimed ones overlap in the trace by construction, max_concurrency)."""
    accepted, merged = totals.accepted, totals.merges_accepted  # gepa's pool grew by both
    candidates = f"new candidates ({accepted} accepted proposals, {merged} accepted merges)"
    compared = [
        ("metric calls", totals.metric_calls, "counted", state.total_num_evals),
        ("full validations", totals.full_val_evals, "counted", state.num_full_ds_evals),
        (candidates, accepted + merged, "added", len(state.program_candidates) - 1),
        ("iterations", totals.iterations, "ran", state.i + 1),
    ]
    problems = [
        f"trace has {ours} {what}, gepa {verb} {theirs}"
        for what, ours, verb, theirs in compared
        if ours != theirs
    ]
    if workers is not None and totals.max_concurrent > workers:
        problems.append(f"{totals.max_concurrent} rollouts ran at once with only {workers} workers")
    return problems


@dataclass(frozen=True)
class RecordedRun:
    """The whole run's totals as written in run_end (a resumed run: every session together)."""

    status: str  # completed | interrupted | failed
    message: str
    metric_calls: int  # gepa's count when completed; else the rollouts the trace holds
    iterations: int
    proposals: int
    accepted: int  # proposals accepted (the trace's; gepa's pool grew by these and the merges)
    full_val_evals: int
    reflection_calls: int  # every call made, including work a resume redid
    tokens_in: int
    tokens_out: int
    cost: float | None
    wall_clock_s: float  # to the last traced event
    workers_seen: int  # the most timed rollouts in flight at once (0: none was timed)
    untimed_calls: int  # adapter calls whose rollouts nothing timed: each spans its call
    unfenced_replies: int  # reflection replies without a ``` pair (gepa took them whole)
    mismatches: tuple[str, ...]  # the trace against gepa's own totals; empty when they agree
    merges: int = 0  # merges gepa judged (use_merge)
    merges_accepted: int = 0


def run_totals(
    trace: Trace, status: str, message: str, state: Any, workers: int | None
) -> RecordedRun:
    """The whole run's totals: the trace's, checked against gepa's `state` (its GEPAState)
    when completed; `workers` is the declared W (None: not declared)."""
    totals = trace_totals(trace)
    every_reflection = trace.of(Reflection)
    paid = [*trace.of(Rollout), *every_reflection]
    costs = [e.cost for e in paid if e.cost is not None]
    checked = status == "completed" and state is not None
    # Cut short, gepa's counts lag the calls made: the trace holds the true ones.
    return RecordedRun(
        status=status,
        message=message,
        metric_calls=state.total_num_evals if checked else totals.metric_calls,
        iterations=state.i + 1 if checked else totals.iterations,
        full_val_evals=state.num_full_ds_evals if checked else totals.full_val_evals,
        proposals=totals.proposals,
        accepted=totals.accepted,
        merges=totals.merges,
        merges_accepted=totals.merges_accepted,
        reflection_calls=len(every_reflection),
        tokens_in=sum(e.tokens_in or 0 for e in paid),
        tokens_out=sum(e.tokens_out or 0 for e in paid),
        cost=sum(costs) if costs else None,
        wall_clock_s=round(max(e.end for e in trace.events), 3),
        workers_seen=totals.max_concurrent,
        untimed_calls=totals.untimed_calls,
        unfenced_replies=sum(r.fenced is False for r in every_reflection),
        mismatches=tuple(mismatches(totals, state, workers) if checked else ()),
    )


def completed_run(out: str | Path, state: GEPAState) -> RecordedRun:
    """The totals of the run in `out` whose gepa loop completed, as its run_end's session
    found them: re-read from its trace and gepa's final `state` (saved in its run_dir), for
    work after gepa's loop that a resume finishes."""
    trace = read_trace(Path(out) / "trace.jsonl")
    end = trace.run_end
    if end is None or end.status != "completed":
        raise PxnError(f"{out} holds no run whose gepa loop completed", subject="run directory")
    return run_totals(trace, end.status, end.message, state, trace.run_start.workers or None)
