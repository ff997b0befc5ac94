"""What happened, as gepa tells it and as the wrapped parts saw it: everything -> trace events.

gepa 0.1.4 calls callbacks on its main thread, between the stages of an
iteration. They give iteration boundaries, which tasks were sampled, which
proposals started and ended, and which children joined the pool. They do NOT
show the seed validation, the start of full validation, a single rollout or a
single reflection: the wrapped adapter and reflection LM (wrappers.py) tell
the recorder of each call, and the selection wrapper tells it of every
proposal and gepa's verdict (full validation comes next).

Assumptions: gepa issues one adapter call and one reflection call at a time
from its main thread (its stages are synchronous), so "the call in flight" is
well defined; what runs inside a call, on any thread, may run concurrently.
A rollout or reflection the wrapped part reports (`report_rollout`,
`report_reflection`) is written with its own times; one it does not report is
written when its call returns, spanning the whole call, so an adapter that
times nothing itself is recorded at the granularity gepa gives. When a call
of an adapter that times its rollouts with `rollout()` (or declares that it
reports each rollout it starts) raises (an error, Ctrl-C), a rollout still
running is written up to the raise, and one it never reported never started:
it is not written, so it counts neither as a metric call nor as in flight.

A reflection job makes one LM call (one component per proposal, gepa's
round-robin). gepa 0.1.4 reflects a step's jobs in one pass (one batched call,
or one call per job in job order); when any call of that pass raises, it
throws the pass away and asks again for every job, one call per job in job
order, a failure there failing only its job. The recorder numbers the jobs
accordingly: a retried job's events carry the same proposal id.

A reflection reported with its prompt is written with `prefix_tokens`, the
tokens its prompt shares with the previous prompt recorded for the same
parent by another job, in job order (prompt_prefix.py); the prompt itself is
never written.
A reflection that returns before an earlier job of its parent in the same
call is written once that job has been (at the latest when the call ends).

The recorder also counts reflections gepa swallowed (gepa 0.1.4 logs a failed
reflection and goes on, even with raise_on_exception=True): a proposal that
started but never ended failed silently; after `max_failures` in a row the
stopper ends the run instead of letting it burn its budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pxn.runner.prompt_prefix import SharedPrefixes
from pxn.runner.redact import describe_error, redact
from pxn.trace import (
    Attempt,
    Budget,
    Decision,
    Event,
    Iteration,
    Reflection,
    Rollout,
    Stage,
    TraceWriter,
    Validation,
)


def candidate_key(candidate: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(candidate.items()))


def has_fence_pair(text: str) -> bool:
    """Whether gepa will find a new text in the reply: it takes what lies between the first
    and last ```, and without a pair the WHOLE reply, chatter included."""
    first = text.find("```")
    return first >= 0 and text.rfind("```") > first


@dataclass(frozen=True)
class RolloutReport:
    """One rollout as the part that ran it saw it; times on the recording's clock."""

    start: float
    end: float
    score: float | None = None
    slot: int | None = None  # the part's own worker slot; None: the recorder assigns one
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1
    node: str | None = None
    task_id: str | None = None


@dataclass(frozen=True)
class ReflectionReport:
    """One reflection LM call as the LM saw it; times on the recording's clock."""

    start: float
    end: float
    text: str | None = None  # the reply (None when the call failed)
    slot: int | None = None
    # The prompt as one text (prompt_text); None when unseen. Never written: prompts may
    # hold user data, so only the prefix it shares with its parent's last prompt is counted.
    prompt: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1


class Slots:
    """Small slot numbers for work in flight: each interval takes the lowest slot none of whose
    intervals it overlaps, so as many slots are used as were busy at once (for intervals
    reported in start order; reported out of order, at worst a few more)."""

    def __init__(self) -> None:
        self._busy: list[list[tuple[float, float]]] = []
        self._lock = threading.Lock()

    def take(self, start: float, end: float) -> int:
        with self._lock:
            for slot, intervals in enumerate(self._busy):
                if all(e <= start or end <= s for s, e in intervals):
                    intervals.append((start, end))
                    return slot
            self._busy.append([(start, end)])
            return len(self._busy) - 1

    def forget_before(self, time: float) -> None:
        """Work that ended before `time` can overlap nothing reported from now on."""
        with self._lock:
            self._busy = [[(s, e) for s, e in slot if e > time] for slot in self._busy]


class InFlight:
    """The lowest slot free right now, for work timed as it starts and ends."""

    def __init__(self) -> None:
        self._busy: set[int] = set()
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[int]:
        with self._lock:
            slot = next(i for i in range(len(self._busy) + 1) if i not in self._busy)
            self._busy.add(slot)
        try:
            yield slot
        finally:
            with self._lock:
                self._busy.discard(slot)


@dataclass
class RolloutNote:
    """What a rollout timed by `Recorder.rollout` tells besides its times."""

    score: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    attempts: int = 1


@dataclass
class Pending:
    """A proposal judged by the selection step, waiting to learn its candidate index."""

    proposal: str
    parent: str
    key: tuple[tuple[str, str], ...]
    time: float
    before: float
    after: float
    selected: bool


@dataclass
class IterationBook:
    """Per-iteration bookkeeping, reset at each on_iteration_start."""

    number: int
    start: float
    task_parents: list[int] = field(default_factory=list)  # on_candidate_selected, in task order
    task_cursor: int = 0  # tasks seen in stage 3a (skipped or started)
    started: list[int] = field(default_factory=list)  # task indices whose reflection started
    issued: int = 0  # reflection jobs handed to the LM so far in this pass (gepa's job order)
    retrying: bool = False  # the first pass failed: gepa asks again for every job, one by one
    outcome: dict[int, bool] = field(default_factory=dict)  # task index -> reply usable
    ended: int = 0  # on_proposal_end count
    reflection_start: float | None = None
    pending: list[Pending] = field(default_factory=list)


@dataclass
class OpenStage:
    name: str
    start: float
    end: float


@dataclass
class RolloutCall:
    """One adapter call gepa made: its examples, flattened in gepa's order."""

    phase: str
    iteration: int
    start: float
    tags: list[tuple[str, str]]  # (candidate label, example label) per rollout
    reported: set[int] = field(default_factory=set)
    running: dict[int, tuple[float, int]] = field(default_factory=dict)  # index -> start, slot


@dataclass
class ReflectionCall:
    """One reflection LM call gepa made (`batch_complete` or a single prompt)."""

    iteration: int
    start: float
    jobs: list[tuple[int, str, str]]  # (task index, proposal id, parent) per prompt
    reported: set[int] = field(default_factory=set)
    held: dict[int, ReflectionReport | None] = field(default_factory=dict)  # awaiting a sibling
    counted: set[int] = field(default_factory=set)  # jobs whose prompt prefix was counted


class ExampleLabels:
    """'train/i' or 'val/i' for the data gepa hands the adapter, found by identity in the
    user's own lists (gepa passes their items through unchanged)."""

    def __init__(self, trainset: Any, valset: Any):
        self._train = _positions(trainset)
        self._val = _positions(valset if valset is not None else trainset)

    def label(self, example: Any, phase: str) -> str:
        val = phase in ("seed_val", "full_val")
        split, positions = ("val", self._val) if val else ("train", self._train)
        index = positions.get(id(example))
        return f"{split}/{'?' if index is None else index}"


def _positions(data: Any) -> dict[int, int]:
    if not isinstance(data, Sequence):
        return {}  # a gepa DataLoader: its items carry no position we can see
    return {id(item): i for i, item in enumerate(data)}


class Recorder:
    """The gepa callbacks object, and what the wrapped parts report to; writes the trace."""

    def __init__(
        self,
        writer: TraceWriter,
        clock: Callable[[], float],
        labels: ExampleLabels,
        *,
        max_failures: int,
        reports_rollouts: bool = False,
    ):
        self._writer = writer
        self.clock = clock
        self._labels = labels
        self._max_failures = max_failures
        self._closed = False
        self._lock = threading.Lock()
        self.state: Any = None  # gepa's GEPAState, from on_iteration_start / on_optimization_end
        self._book = IterationBook(number=0, start=0.0)
        self._phase = "seed_val"  # of the next adapter call
        self._stage: OpenStage | None = None
        self._rollouts: RolloutCall | None = None
        self._calls_lock = threading.Lock()  # the rollout call in flight, against late reports
        # A call that raised has reported every rollout it started, or has them running in
        # `rollout()`: declared, or seen once the adapter times a rollout with `rollout()`.
        self._timed = reports_rollouts
        self._reflections: ReflectionCall | None = None
        self._prefixes = SharedPrefixes()
        self._prefix_lock = threading.Lock()  # reflections report from the LM's threads
        self._rollout_slots = Slots()
        self._in_flight = InFlight()
        self._reflection_slots = Slots()
        self._child_of: dict[tuple[tuple[str, str], ...], str] = {}  # child key -> proposal id
        self._consecutive_failures = 0
        self._last_reflection_error: str | None = None
        self.stop_reason: str | None = None
        # Read by the live progress line.
        self.accepted = 0
        self.metric_calls = 0  # gepa's count, from on_budget_updated
        self.rollouts = 0  # rollouts written by this session
        self.best_val: float | None = None

    # ---- writing ----

    def write(self, event: Event) -> None:
        # After an interrupt, threads of the user's code may still finish a call while
        # the trace is already closed by run_end: those late events are dropped.
        with self._lock:
            if not self._closed:
                self._writer.write(event)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._writer.close()

    @property
    def iteration(self) -> int:
        return self._book.number

    @property
    def phase(self) -> str:
        """The phase of the adapter call in flight (or the next one)."""
        return self._phase

    # ---- rollouts: the adapter wrapper's calls ----

    def begin_rollouts(self, items: Sequence[tuple[dict[str, str], Sequence[Any]]]) -> None:
        phase = self._phase
        start = self.clock()
        self._rollout_slots.forget_before(start)
        self._open_stage(phase, start)
        tags = []
        for candidate, batch in items:
            label = "0" if phase == "seed_val" else self._candidate_label(candidate)
            tags.extend((label, self._labels.label(example, phase)) for example in batch)
        self._rollouts = RolloutCall(phase, self._book.number, start, tags)

    def report_rollout(self, index: int, report: RolloutReport) -> None:
        with self._calls_lock:
            call = self._rollouts
            if call is None or not 0 <= index < len(call.tags) or index in call.reported:
                return  # a late report after its call ended (an interrupt): nothing to attach to
            call.reported.add(index)
            call.running.pop(index, None)
        self._write_rollout(call, index, report)

    def _started(self, index: int, start: float, slot: int) -> None:
        with self._calls_lock:
            call = self._rollouts
            if call is not None and 0 <= index < len(call.tags):
                call.running[index] = (start, slot)
                self._timed = True

    @contextmanager
    def rollout(self, index: int) -> Iterator[RolloutNote]:
        """Time one rollout of the call in flight where it runs; its slot is the lowest free
        while it runs. A raise inside is recorded as the rollout's error and goes on."""
        note = RolloutNote()
        with self._in_flight.slot() as slot:
            start = self.clock()
            self._started(index, start, slot)
            error: str | None = None
            try:
                yield note
            except BaseException as exc:
                error = describe_error(exc)
                raise
            finally:
                report = RolloutReport(
                    start=start,
                    end=self.clock(),
                    score=note.score,
                    slot=slot,
                    tokens_in=note.tokens_in,
                    tokens_out=note.tokens_out,
                    cost=note.cost,
                    error=error,
                    attempts=note.attempts,
                )
                self.report_rollout(index, report)

    def end_rollouts(self, scores: Sequence[float] | None, error: str | None) -> None:
        """The adapter call returned (`scores`, in gepa's order) or raised (`error`)."""
        with self._calls_lock:
            call, self._rollouts = self._rollouts, None
        if call is None:
            return
        end = self.clock()
        for index in range(len(call.tags)):
            if index in call.reported:
                continue
            start, slot = call.running.get(index, (call.start, None))
            if error is not None and self._timed and index not in call.running:
                continue  # never started: it ran no work and held no slot
            score = scores[index] if scores is not None and index < len(scores) else None
            report = RolloutReport(start=start, end=end, score=score, slot=slot, error=error)
            self._write_rollout(call, index, report)
        if self._stage is not None:
            self._stage.end = end

    def _write_rollout(self, call: RolloutCall, index: int, r: RolloutReport) -> None:
        slot = r.slot if r.slot is not None else self._rollout_slots.take(r.start, r.end)
        candidate, example = call.tags[index]
        self.write(
            Rollout(
                start=r.start,
                end=r.end,
                iteration=call.iteration,
                phase=call.phase,
                worker=slot,
                candidate=candidate,
                example=example,
                score=None if r.score is None else float(r.score),
                tokens_in=r.tokens_in,
                tokens_out=r.tokens_out,
                cost=r.cost,
                error=None if r.error is None else redact(r.error),
                attempts=r.attempts,
                node=r.node,
                task_id=r.task_id,
            )
        )
        with self._lock:
            self.rollouts += 1

    # ---- reflections: the reflection LM wrapper's calls ----

    def begin_reflections(self, count: int) -> None:
        """gepa asks the LM for `count` replies, one per reflection job, in job order."""
        book = self._book
        jobs = []
        for task in book.started[book.issued : book.issued + count]:
            parent = book.task_parents[task] if task < len(book.task_parents) else -1
            jobs.append((task, f"{book.number}-{task}", str(parent)))
        while len(jobs) < count:  # more calls than jobs seen starting: label honestly
            jobs.append((-1, f"{book.number}-?", "?"))
        book.issued += count
        start = self.clock()
        self._reflection_slots.forget_before(start)
        self._reflections = ReflectionCall(book.number, start, jobs)

    def report_reflection(self, index: int, report: ReflectionReport | None) -> None:
        """`None`: the LM answered this prompt without a call (e.g. from an earlier reply)."""
        call = self._reflections
        if call is None or not 0 <= index < len(call.jobs):
            return
        self._take_reflection(call, index, report)

    def end_reflections(self, replies: Sequence[str] | None, error: str | None) -> None:
        """The LM returned `replies` or raised `error`; a raise fails every job of the call, and
        in the step's first pass sends gepa back to its first job (see the module's docstring)."""
        call = self._reflections
        if call is None:
            return
        self._reflections = None
        end = self.clock()
        for index, (task, _, _) in enumerate(call.jobs):
            text = replies[index] if replies is not None and index < len(replies) else None
            if index not in call.reported:
                report = ReflectionReport(start=call.start, end=end, text=text, error=error)
                self._take_reflection(call, index, report)
            self._book.outcome[task] = error is None
        if error is not None:
            self._last_reflection_error = error
            if not self._book.retrying:  # gepa starts over from the step's first job
                self._book.issued = 0
                self._book.retrying = True

    def _take_reflection(
        self, call: ReflectionCall, index: int, report: ReflectionReport | None
    ) -> None:
        """Count the prompt prefixes of the call's jobs in job order, parent by parent: a job
        waits for every earlier job of its parent; then write the reflections counted."""
        ready = []
        with self._prefix_lock:
            call.reported.add(index)
            call.held[index] = report
            for i in sorted(call.held):
                parent = call.jobs[i][2]
                earlier = (j for j in range(i) if call.jobs[j][2] == parent)
                if any(j not in call.counted for j in earlier):
                    continue
                r = call.held.pop(i)
                call.counted.add(i)
                if r is not None:
                    known = parent if parent.isdigit() else None
                    job = call.jobs[i][1]
                    prefix = self._prefixes.tokens(known, job, r.prompt, r.tokens_in)
                    ready.append((i, r, prefix))
        for i, r, prefix_tokens in ready:
            self._write_reflection(call, i, r, prefix_tokens)

    def _write_reflection(
        self, call: ReflectionCall, index: int, r: ReflectionReport, prefix_tokens: int | None
    ) -> None:
        slot = r.slot if r.slot is not None else self._reflection_slots.take(r.start, r.end)
        _, proposal, parent = call.jobs[index]
        self.write(
            Reflection(
                start=r.start,
                end=r.end,
                iteration=call.iteration,
                slot=slot,
                proposal=proposal,
                parent=parent,
                tokens_in=r.tokens_in,
                tokens_out=r.tokens_out,
                cost=r.cost,
                error=None if r.error is None else redact(r.error),
                attempts=r.attempts,
                fenced=None if r.text is None or r.error else has_fence_pair(r.text),
                prefix_tokens=prefix_tokens,
            )
        )

    def report_attempt(
        self, *, call: str, slot: int, attempt: int, start: float, end: float, error: str
    ) -> None:
        """One failed try of an LM call ("rollout" or "reflection") that was retried or given up;
        `attempt` counts tries across the whole rollout or reflection."""
        phase = "reflection" if call == "reflection" else self._phase
        self.write(
            Attempt(
                start=start,
                end=end,
                iteration=self._book.number,
                call=call,
                phase=phase,
                worker=slot,
                attempt=attempt,
                error=redact(error),
            )
        )

    # ---- stages ----

    def _open_stage(self, phase: str, start: float) -> None:
        if self._stage is not None and self._stage.name == phase:
            return  # one more adapter call of the same stage (gepa's pair-by-pair fallback)
        self.settle()
        book = self._book
        if phase == "child_minibatch" and book.reflection_start is not None:
            self._write_stage("reflection", book.reflection_start, start)
            book.reflection_start = None
        self._stage = OpenStage(phase, start, start)

    def settle(self) -> None:
        """Close the rollout stage in flight, if any: gepa has moved on."""
        stage, self._stage = self._stage, None
        if stage is None:
            return
        self._write_stage(stage.name, stage.start, stage.end)
        if stage.name == "parent_minibatch":
            self._book.reflection_start = stage.end

    def _write_stage(self, name: str, start: float, end: float) -> None:
        self.write(Stage(start=start, end=end, iteration=self._book.number, name=name))

    # ---- labels ----

    def _candidate_label(self, candidate: dict[str, str]) -> str:
        """gepa's index for a pool member; the proposal id "i-j" for a child not yet in it."""
        key = candidate_key(candidate)
        if self.state is not None:
            for idx, cand in enumerate(self.state.program_candidates):
                if candidate_key(cand) == key:
                    return str(idx)
        return self._child_of.get(key, "?")

    # ---- gepa callbacks (main thread) ----

    def on_optimization_start(self, event: dict[str, Any]) -> None:
        self._phase = "seed_val"

    def on_iteration_start(self, event: dict[str, Any]) -> None:
        self.settle()
        self.state = event["state"]
        self._book = IterationBook(number=event["iteration"], start=self.clock())
        self._child_of.clear()
        self._phase = "parent_minibatch"

    def on_candidate_selected(self, event: dict[str, Any]) -> None:
        self._book.task_parents.append(event["candidate_idx"])

    def on_evaluation_start(self, event: dict[str, Any]) -> None:
        self.settle()
        parent = event["candidate_idx"] is not None
        self._phase = "parent_minibatch" if parent else "child_minibatch"

    def on_evaluation_end(self, event: dict[str, Any]) -> None:
        self.settle()

    def on_evaluation_skipped(self, event: dict[str, Any]) -> None:
        self._book.task_cursor += 1

    def reflective_dataset_failed(self) -> None:
        """The adapter could not build a task's reflective dataset: gepa skips the task with no
        callback (it logs the exception), so the next proposal to start is the next task's."""
        self._book.task_cursor += 1

    def on_proposal_start(self, event: dict[str, Any]) -> None:
        self._book.started.append(self._book.task_cursor)
        self._book.task_cursor += 1

    def on_proposal_end(self, event: dict[str, Any]) -> None:
        book = self._book
        book.ended += 1
        # gepa fires this for each job whose reflection gave texts, in job order.
        ok_tasks = [task for task in book.started if book.outcome.get(task, True)]
        if book.ended > len(ok_tasks) or self.state is None:
            return
        task = ok_tasks[book.ended - 1]
        if task < len(book.task_parents):
            # The child is its parent with the new texts; remember it to label its rollouts.
            parent = self.state.program_candidates[book.task_parents[task]]
            child = {**parent, **event["new_instructions"]}
            self._child_of.setdefault(candidate_key(child), f"{book.number}-{task}")

    def on_candidate_accepted(self, event: dict[str, Any]) -> None:
        self.settle()
        idx = event["new_candidate_idx"]
        key = candidate_key(self.state.program_candidates[idx])
        for pending in self._book.pending:
            if pending.selected and pending.key == key:
                self._book.pending.remove(pending)
                self._decide(pending, accepted=True, candidate=str(idx))
                break

    def on_valset_evaluated(self, event: dict[str, Any]) -> None:
        self.settle()
        score = event["average_score"]
        now = self.clock()
        self.write(
            Validation(
                start=now,
                end=now,
                iteration=event["iteration"],
                candidate=str(event["candidate_idx"]),
                score=float(score),
                examples=int(event["num_examples_evaluated"]),
            )
        )
        if self.best_val is None or score > self.best_val:
            self.best_val = score

    def on_budget_updated(self, event: dict[str, Any]) -> None:
        self.settle()
        self.metric_calls = event["metric_calls_used"]
        now = self.clock()
        self.write(
            Budget(
                start=now,
                end=now,
                iteration=event["iteration"],
                metric_calls=int(event["metric_calls_used"]),
                delta=int(event["metric_calls_delta"]),
            )
        )

    def on_iteration_end(self, event: dict[str, Any]) -> None:
        self.settle()
        book = self._book
        now = self.clock()
        if book.reflection_start is not None:  # reflections ran but no child was evaluated
            self._write_stage("reflection", book.reflection_start, now)
            book.reflection_start = None
        for pending in book.pending:
            self._decide(pending, accepted=False, candidate=None)
        book.pending.clear()
        self.write(Iteration(start=book.start, end=now, iteration=book.number))
        self._count_failures(len(book.started), book.ended)

    def on_optimization_end(self, event: dict[str, Any]) -> None:
        self.settle()
        self.state = event["final_state"]

    # ---- the selection wrapper's report ----

    def selected(self, proposals: list[Any], chosen: list[Any]) -> None:
        self.settle()
        now = self.clock()
        chosen_ids = {id(p) for p in chosen}
        for p in proposals:
            self._book.pending.append(
                Pending(
                    proposal=str(p.metadata.get("proposal_id", "?")),
                    parent=",".join(str(i) for i in p.parent_program_ids),
                    key=candidate_key(p.candidate),
                    time=now,
                    before=float(sum(p.subsample_scores_before or [])),
                    after=float(sum(p.subsample_scores_after or [])),
                    selected=id(p) in chosen_ids,
                )
            )
        self._phase = "full_val"  # gepa validates the chosen children next

    def _decide(self, pending: Pending, *, accepted: bool, candidate: str | None) -> None:
        self.accepted += accepted
        self.write(
            Decision(
                start=pending.time,
                end=pending.time,
                iteration=self._book.number,
                proposal=pending.proposal,
                parent=pending.parent,
                accepted=accepted,
                candidate=candidate,
                score_before=pending.before,
                score_after=pending.after,
            )
        )

    # ---- reflection failures gepa swallowed ----

    def _count_failures(self, started: int, ended: int) -> None:
        lost = started - ended
        self._consecutive_failures = lost if ended > 0 else self._consecutive_failures + lost
        if self._consecutive_failures >= self._max_failures and self.stop_reason is None:
            last = self._last_reflection_error
            self.stop_reason = (
                f"stopped: {self._consecutive_failures} reflections in a row produced no "
                f"proposal{f' (last error: {last})' if last else ''}; check the reflection model"
            )

    def should_stop(self, state: Any) -> bool:
        """A gepa stopper: checked at the top of every iteration."""
        return self.stop_reason is not None
