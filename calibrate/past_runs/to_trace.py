"""A past run as a trace of the one schema: scores, verdicts and counts, no durations.

Every event a recorded run of the same iterations would hold is written from
past_run.py's reading (a parent's scores are null where gepa judged no child of its
task, the seed's validation scores where only its mean was logged, its validation then
that mean). No time is made up: each event is an instant at its iteration's slot on an
order-only clock (iteration i at i), every rollout is untimed, and run_start's meta says
`durations: none`. Such a trace carries the search, never a latency.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pxn.calibrate.past_runs.past_run import IterationRecord, PastRun, Task
from pxn.trace import (
    Decision,
    Event,
    Iteration,
    Merge,
    NoProposal,
    Reflection,
    Rollout,
    RunEnd,
    RunStart,
    Stage,
    TraceWriter,
    Validation,
)

DURATIONS_KEY = "durations"  # run_start meta: "none" in a trace made from a past run
NO_DURATIONS = "none"
FROM_KEY = "from"  # run_start meta: what the trace was made from


def past_run_events(
    run: PastRun,
    *,
    workers: int,
    reflection_concurrency: int,
    budget: int,
    meta: dict[str, Any],
) -> list[Event]:
    """The run's events, in the order a recording would write them."""
    events: list[Event] = [
        RunStart(
            start=0.0,
            end=0.0,
            source="runner",
            shape=str(run.shape),
            budget=budget,
            workers=workers,
            reflection_concurrency=reflection_concurrency,
            valset_size=len(run.valset),
            trainset_size=run.trainset_size,
            minibatch=run.minibatch,
            seed=0,
            meta={
                DURATIONS_KEY: NO_DURATIONS,
                FROM_KEY: str(run.path),
                "use_merge": run.merges_on,
                "max_merge_invocations": 5,
                "components": run.components,
                "selection": "all",
                **meta,
            },
        )
    ]
    events += _seed(run)
    for record in run.iterations:
        events += _iteration(run, record)
    iterations = len(run.iterations)
    events.append(
        RunEnd(
            start=float(iterations),
            end=float(iterations),
            status="completed",
            metric_calls=run.metric_calls,
            iterations=iterations,
            workers=workers,
        )
    )
    return events


def write_past_run_trace(path: Path, events: list[Event]) -> Path:
    with TraceWriter(path) as writer:
        for event in events:
            writer.write(event)
    return path


def _at(kind: type[Event], i: int, **fields: Any) -> Event:
    """An event of iteration i, at the instant i on the order-only clock."""
    return kind(start=float(i), end=float(i), iteration=i, **fields)


def _rollouts(i: int, phase: str, candidate: str, examples: list[str], scores: Any) -> list:
    """One untimed rollout per example, all at the iteration's instant."""
    return [
        _at(
            Rollout,
            i,
            phase=phase,
            worker=lane,
            candidate=candidate,
            example=e,
            score=score,
            timed=False,
        )
        for lane, (e, score) in enumerate(zip(examples, scores, strict=False))
    ]


def _val_rollouts(run: PastRun, i: int, phase: str, candidate: int) -> list[Event]:
    scores = run.val_scores.per_example[candidate] if run.val_scores is not None else {}
    examples = [f"val/{example}" for example in run.valset]
    return _rollouts(i, phase, str(candidate), examples, [scores.get(e) for e in run.valset])


def _validation(run: PastRun, i: int, candidate: int) -> list[Event]:
    scores = run.val_scores
    if scores is None or candidate >= len(scores.means):
        return []
    return [
        _at(
            Validation,
            i,
            candidate=str(candidate),
            score=scores.means[candidate],
            examples=scores.examples[candidate],
        )
    ]


def _seed(run: PastRun) -> list[Event]:
    return [
        *_val_rollouts(run, 0, "seed_val", 0),
        _at(Stage, 0, name="seed_val"),
        *_validation(run, 0, 0),
    ]


def _iteration(run: PastRun, record: IterationRecord) -> list[Event]:
    i = record.number
    events: list[Event] = []
    if record.merge_not_found:
        events.append(_at(NoProposal, i, proposal=f"{i}-merge", reason="merge_not_found"))
    events += _merge(record) if record.merge is not None else _proposals(record)
    for program in record.new_programs:
        events += _val_rollouts(run, i, "full_val", program)
    if record.new_programs:
        events.append(_at(Stage, i, name="full_val"))
    for program in record.new_programs:
        events += _validation(run, i, program)
    events.append(_at(Iteration, i))
    return events


def _minibatch_rollouts(
    i: int, phase: str, candidate: str, task: Task, scores: tuple[float, ...] | None
) -> list[Event]:
    examples = [f"train/{example}" for example in task.minibatch]
    return _rollouts(i, phase, candidate, examples, scores or [None] * len(examples))


def _proposals(record: IterationRecord) -> list[Event]:
    i = record.number
    events: list[Event] = []
    for task in record.parent_evaluations():
        events += _minibatch_rollouts(i, "parent_minibatch", str(task.parent), task, task.before)
    if record.tasks:
        events.append(_at(Stage, i, name="parent_minibatch"))
    reflected = [t for t in record.tasks if t.judged or t.reason in REFLECTED]
    for slot, task in enumerate(reflected):
        failed = task.reason == "reflection_failed"
        events.append(
            _at(
                Reflection,
                i,
                slot=slot,
                proposal=task.proposal,
                parent=str(task.parent),
                error="the reflection failed (gepa's log)" if failed else None,
            )
        )
    if reflected:
        events.append(_at(Stage, i, name="reflection"))
    events += [
        _at(NoProposal, i, proposal=t.proposal, parent=str(t.parent), reason=t.reason)
        for t in record.tasks
        if t.reason is not None
    ]
    judged = [t for t in record.tasks if t.judged]
    for task in judged:
        events += _minibatch_rollouts(i, "child_minibatch", task.proposal, task, task.after)
    if judged:
        events.append(_at(Stage, i, name="child_minibatch"))
    events += [
        _at(
            Decision,
            i,
            proposal=t.proposal,
            parent=str(t.parent),
            accepted=t.candidate is not None,
            candidate=None if t.candidate is None else str(t.candidate),
            score_before=sum(t.before or ()),
            score_after=sum(t.after or ()),
        )
        for t in judged
    ]
    return events


# The reasons a task reached its reflection: it then had a reflection call.
REFLECTED = ("reflection_failed", "no_texts")


def _merge(record: IterationRecord) -> list[Event]:
    i, merge = record.number, record.merge
    assert merge is not None
    proposal = f"{i}-merge"
    examples = [f"val/{example}" for example in merge.subsample]
    return [
        *_rollouts(i, "merge_subsample", proposal, examples, merge.after),
        _at(Stage, i, name="merge_subsample"),
        _at(
            Merge,
            i,
            proposal=proposal,
            parents=f"{merge.parents[0]},{merge.parents[1]}",
            ancestor=None if merge.ancestor is None else str(merge.ancestor),
            accepted=merge.candidate is not None,
            candidate=None if merge.candidate is None else str(merge.candidate),
            score_before=merge.before,
            score_after=sum(merge.after),
        ),
    ]
