"""A finished gepa run as its run_dir tells it: iterations, tasks, verdicts, scores, counts.

Per iteration (numbered from 1, as gepa's callbacks number them): its tasks in sampling
order with parent, minibatch and, where gepa judged a child, the scores before and
after; the new programs matched, parent by parent, to the tasks that passed; a merge.
From the state: gepa's metric-call count. The validation scores (`ValScores`) are the
state's where it was read, else gepa's log lines' where they give every new program's:
those keep the seed's mean alone (gepa 0.1.4 logs no score of the seed's per example).

What the files do not say is read as follows, and the report names each:
- why a task made no proposal: the log's word; else skipped where its parent's known
  minibatch scores were all PERFECT, else lost before its reflection;
- P x N: a parent's N tasks come one after another, so N divides each iteration into
  single-parent blocks; where several N do, the one nearest a square shape is taken;
- the trainset's size: the largest training id seen, plus one;
- the budget: between the calls made before the last iteration began and at the end.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pxn.calibrate.past_runs.gepa_log import GepaLog
from pxn.calibrate.past_runs.run_dir import STATE, RunDirFiles
from pxn.errors import PxnError
from pxn.shape import Shape

PERFECT = 1.0  # gepa's and dspy.GEPA's default perfect_score


@dataclass(frozen=True)
class Task:
    proposal: str  # gepa's id "i-j"
    parent: int
    minibatch: tuple[Any, ...]  # training ids
    before: tuple[float, ...] | None  # the parent's minibatch scores, when gepa judged a child
    after: tuple[float, ...] | None  # the child's
    candidate: int | None = None  # the child's index in the pool, when it joined it
    reason: str | None = None  # why no child was judged (trace.NoProposal's reasons)

    @property
    def judged(self) -> bool:
        return self.after is not None

    @property
    def passed(self) -> bool:
        """Beat its parent on the minibatch (gepa's default judge: strictly more)."""
        return self.judged and sum(self.after or ()) > sum(self.before or ())


@dataclass(frozen=True)
class MergeAttempt:
    parents: tuple[int, int]
    ancestor: int | None
    subsample: tuple[Any, ...]  # validation ids
    before: float  # the higher of the parents' sums on the subsample
    after: tuple[float, ...]  # the merged program's scores there
    candidate: int | None  # its index in the pool when accepted


@dataclass(frozen=True)
class IterationRecord:
    number: int  # from 1
    tasks: tuple[Task, ...]
    merge: MergeAttempt | None
    merge_not_found: bool  # a merge was due and gepa found no pair
    new_programs: tuple[int, ...]
    failed: bool  # gepa logged an exception that ended it

    def parent_evaluations(self) -> list[Task]:
        """The tasks whose parent's minibatch gepa evaluated: it evaluates each distinct
        (parent, minibatch) once, for the first task that draws it."""
        first: dict[tuple[int, tuple[Any, ...]], Task] = {}
        for task in self.tasks:
            first.setdefault((task.parent, task.minibatch), task)
        return list(first.values())


@dataclass(frozen=True)
class ValScores:
    """Every candidate's validation scores, from the one source that gave them all."""

    per_example: tuple[dict[Any, float], ...]  # per candidate: validation id -> score, known
    means: tuple[float, ...]  # per candidate: its mean validation score
    examples: tuple[int, ...]  # per candidate: how many examples the mean is over
    source: str  # STATE, or the log's path

    @property
    def from_log(self) -> bool:
        return self.source != STATE


@dataclass(frozen=True)
class PastRun:
    path: Path
    iterations: tuple[IterationRecord, ...]
    valset: tuple[Any, ...]  # validation ids, the seed's, in gepa's order
    val_scores: ValScores | None  # None where neither the state nor the log gives them
    # Why the scores are not the state's (when read from the log), or why unknown.
    val_note: str
    shape: Shape
    shape_note: str
    minibatch: int
    trainset_size: int
    components: int
    metric_calls: int  # gepa's count (the state's), else counted here
    metric_calls_note: str
    budget_low: int  # the budget lies in (budget_low, budget_high]
    budget_high: int
    merges_on: bool  # gepa's merge ran (a merge was due at least once)
    reasons_guessed: int  # tasks whose reason no log gave
    log: GepaLog | None
    notes: tuple[str, ...]


def past_run(files: RunDirFiles, log: GepaLog | None = None, shape: Shape | None = None) -> PastRun:
    """The run the files tell of; `log` gives why tasks made no proposal (gepa's run_log.txt
    is read when the directory holds it), `shape` the P x N when the user gave it."""
    notes: list[str] = []
    records = [_iteration(entry) for entry in files.run_log]
    val_scores, val_note = _val_scores(files, log, records)
    valset = _valset(files, val_scores, log)
    records = [_matched(r, files) for r in records]
    scores_by_parent = _known_scores(records)
    reasoned = [_with_reasons(record, log, scores_by_parent) for record in records]
    with_reasons = [record for record, _ in reasoned]
    minibatch = _minibatch(with_reasons)
    found_shape, shape_note = _shape(with_reasons) if shape is None else (shape, "given")
    counted = len(valset) + sum(_iteration_calls(r, len(valset)) for r in with_reasons)
    metric_calls, calls_note = counted, "counted from run_log.json"
    if files.state is not None:
        metric_calls, calls_note = files.state.metric_calls, "gepa's count (gepa_state.bin)"
        if files.state.metric_calls != counted:
            notes.append(
                f"gepa counted {files.state.metric_calls} metric calls, the run log's "
                f"evaluations make {counted} (an adapter that counts its own calls, or gepa's "
                "cache): gepa's count is used"
            )
    train_ids = [
        i for r in with_reasons for t in r.tasks for i in t.minibatch if isinstance(i, int)
    ]
    return PastRun(
        path=files.path,
        iterations=tuple(with_reasons),
        valset=valset,
        val_scores=val_scores,
        val_note=val_note,
        shape=found_shape,
        shape_note=shape_note,
        minibatch=minibatch,
        trainset_size=1 + max(train_ids, default=minibatch - 1),
        components=len(files.candidates[0]) if files.candidates else 1,
        metric_calls=metric_calls,
        metric_calls_note=calls_note,
        budget_low=metric_calls - _iteration_calls(with_reasons[-1], len(valset)),
        budget_high=metric_calls,
        merges_on=any(r.merge is not None or r.merge_not_found for r in with_reasons),
        reasons_guessed=sum(guessed for _, guessed in reasoned),
        log=log,
        notes=tuple(notes),
    )


def _iteration(entry: dict[str, Any]) -> IterationRecord:
    number = int(entry["i"]) + 1
    tasks = []
    for j, task in enumerate(entry.get("tasks") or ()):
        before, after = task.get("subsample_scores"), task.get("new_subsample_scores")
        tasks.append(
            Task(
                proposal=f"{number}-{j}",
                parent=int(task["parent_idx"]),
                minibatch=tuple(task["subsample_ids"]),
                before=None if after is None else tuple(map(float, before or ())),
                after=None if after is None else tuple(map(float, after)),
            )
        )
    merge = None
    if entry.get("merged") and "new_program_subsample_scores" in entry:
        id1, id2, ancestor = entry["merged_entities"]
        sums = (sum(entry["id1_subsample_scores"]), sum(entry["id2_subsample_scores"]))
        merge = MergeAttempt(
            parents=(int(id1), int(id2)),
            ancestor=None if ancestor is None else int(ancestor),
            subsample=tuple(entry["subsample_ids"]),
            before=float(max(sums)),
            after=tuple(map(float, entry["new_program_subsample_scores"])),
            candidate=None,
        )
    return IterationRecord(
        number=number,
        tasks=tuple(tasks),
        merge=merge,
        merge_not_found=bool(entry.get("invoked_merge")) and not entry.get("merged"),
        new_programs=tuple(int(i) for i in entry.get("new_program_indices", ())),
        failed=False,
    )


def _val_scores(
    files: RunDirFiles, log: GepaLog | None, records: list[IterationRecord]
) -> tuple[ValScores | None, str]:
    """The state's validation scores where it was read, else the log's where it gives the
    seed's mean and every new program's scores (each logged in the iteration run_log.json
    found it in); and why they are not the state's, or why unknown."""
    if files.state is not None:
        return _of(files.state.val_scores, STATE), ""
    why = files.state_note
    if log is None:
        return None, f"{why}, and no gepa log was read"
    if log.seed_score is None and not log.new_scores:
        return None, f"{why}, and its log ({log.source}) holds no validation score"
    wanted = [(r.number, program) for r in records for program in r.new_programs]
    logged = log.new_scores
    missing = [str(c) for i, c in wanted if c not in logged or logged[c].iteration != i]
    if log.seed_score is None or missing:
        lacks = ["the seed's mean"] if log.seed_score is None else []
        if missing:
            lacks.append(f"the scores of new program(s) {', '.join(missing)}")
        return None, f"{why}, and its log ({log.source}) lacks {' and '.join(lacks)}"
    seed = log.seed_score
    new = [logged[c].scores for _, c in wanted]
    found = _of(new, log.source)
    return ValScores(
        per_example=({}, *found.per_example),
        means=(seed.mean, *found.means),
        examples=(seed.examples, *found.examples),
        source=log.source,
    ), why


def _of(per_example: Sequence[dict[Any, float]], source: str) -> ValScores:
    """ValScores of every candidate's per-example scores, in order."""
    return ValScores(
        per_example=tuple(per_example),
        means=tuple(sum(s.values()) / len(s) for s in per_example),
        examples=tuple(len(s) for s in per_example),
        source=source,
    )


def _valset(files: RunDirFiles, val_scores: ValScores | None, log: GepaLog | None) -> tuple:
    if val_scores is not None and val_scores.per_example[0]:  # the seed's, example by example
        return tuple(val_scores.per_example[0])
    for entry in files.run_log:
        if "evaluated_val_indices" in entry:
            return tuple(entry["evaluated_val_indices"])
    if log is not None and log.seed_score is not None:
        # No program was validated but the seed: only the count matters, and gepa numbers a
        # list's examples so.
        return tuple(range(log.seed_score.valset_size))
    raise PxnError(
        f"run_dir {files.path} says neither which validation examples the seed was scored on "
        "(gepa_state.bin) nor which a new program was (run_log.json, gepa's log lines): the "
        "validation set's size is unknown; give the run's gepa_state.bin or its gepa log too"
    )


def _matched(record: IterationRecord, files: RunDirFiles) -> IterationRecord:
    """The new programs matched to the merge or the tasks that passed, in order; a parent the
    state names for a program is kept to."""
    new = list(record.new_programs)
    if record.merge is not None:
        accepted = sum(record.merge.after) >= record.merge.before and bool(new)
        return replace(record, merge=replace(record.merge, candidate=new[0] if accepted else None))
    parents = files.state.parents if files.state is not None else None
    tasks = list(record.tasks)
    for program in new:
        wanted = parents[program][0] if parents is not None and program < len(parents) else None
        for j, task in enumerate(tasks):
            if task.passed and task.candidate is None and wanted in (None, task.parent):
                tasks[j] = replace(task, candidate=program)
                break
    return replace(record, tasks=tuple(tasks))


def _known_scores(records: list[IterationRecord]) -> dict[int, dict[Any, float]]:
    """Each parent's minibatch scores on the training examples its judged tasks show."""
    known: dict[int, dict[Any, float]] = defaultdict(dict)
    for record in records:
        for task in record.tasks:
            if task.before is not None:
                known[task.parent].update(zip(task.minibatch, task.before, strict=False))
    return known


def _with_reasons(
    record: IterationRecord, log: GepaLog | None, known: dict[int, dict[Any, float]]
) -> tuple[IterationRecord, int]:
    """The record with a reason for each task that made no proposal, and how many were read
    off the scores rather than the log."""
    silent = [j for j, t in enumerate(record.tasks) if not t.judged]
    failed = log is not None and record.number in log.failed_iterations
    logged = log.reasons(record.number) if log is not None else []
    tasks = list(record.tasks)
    guessed = 0
    for position, j in enumerate(silent):
        task = tasks[j]
        if position < len(logged):
            reason = logged[position]
        elif failed:
            reason = "iteration_failed"
        else:
            scores = [known[task.parent].get(i) for i in task.minibatch]
            perfect = all(s is not None and s >= PERFECT for s in scores)
            reason = "perfect_parent" if perfect else "reflective_dataset"
            guessed += 1
        tasks[j] = replace(task, reason=reason)
    return replace(record, tasks=tuple(tasks), failed=failed), guessed


def _minibatch(records: list[IterationRecord]) -> int:
    sizes = [len(t.minibatch) for r in records for t in r.tasks]
    if not sizes:
        raise PxnError("the run log holds no task: the run proposed nothing to calibrate from")
    return max(set(sizes), key=sizes.count)


def _shape(records: list[IterationRecord]) -> tuple[Shape, str]:
    """P x N from the parents' pattern (module docstring)."""
    ks = [len(r.tasks) for r in records if r.tasks and r.merge is None]
    k = max(set(ks), key=ks.count)
    parents = [[t.parent for t in r.tasks] for r in records if len(r.tasks) == k]
    unrefuted = [
        n
        for n in range(1, k + 1)
        if k % n == 0
        and all(len(set(ps[i : i + n])) == 1 for ps in parents for i in range(0, k, n))
    ]
    n = min(unrefuted, key=lambda m: (abs(m - math.sqrt(k)), m))
    shape = Shape(k // n, n)
    if len(unrefuted) > 1:
        others = ", ".join(str(Shape(k // m, m)) for m in unrefuted if m != n)
        return shape, (
            f"read as {shape.label}: its parents fit {others} too (an iteration's parent "
            "draws often pick the same parent); give the shape it ran as"
        )
    return shape, f"read as {shape.label} from the parents of its {len(parents)} iterations"


def _iteration_calls(record: IterationRecord, valset_size: int) -> int:
    """The metric calls gepa made in an iteration, as its run log records them."""
    if record.merge is not None:
        return len(record.merge.subsample) + valset_size * len(record.new_programs)
    parent_calls = sum(len(t.minibatch) for t in record.parent_evaluations())
    child_calls = sum(len(t.minibatch) for t in record.tasks if t.judged)
    return parent_calls + child_calls + valset_size * len(record.new_programs)
