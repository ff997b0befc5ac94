"""The instrumented GEPA adapter: rollouts on exactly W worker slots, each one traced.

A rollout whose LM call still fails after its retries scores 0 with its error, and the
run goes on. `run_rollout` runs a rollout wherever it runs: the pool (`ThreadRollouts`
here, `RayRollouts` in ray_pool.py) is the only difference between backends.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields, replace
from functools import partial
from typing import Any, Protocol

from gepa.core.adapter import EvaluationBatch

from pxn.runner.lm import CallSite, ChatModel
from pxn.runner.record import Recording, RolloutReport
from pxn.runner.redact import describe_error
from pxn.runner.retry import CallFailed, FailedAttempt
from pxn.runner.tasks import Feedback, Task


@dataclass(frozen=True)
class Item:
    """One example as gepa sees it: the task's own object plus a stable id with its split."""

    id: str  # "train/7", "val/2", "test/0"
    split: str
    payload: Any


def wrap_split(split: str, examples: Sequence[Any]) -> list[Item]:
    return [Item(f"{split}/{i}", split, ex) for i, ex in enumerate(examples)]


@dataclass(frozen=True)
class RolloutRequest:
    """One rollout to run: a candidate on one example (the task's own object), in a phase
    ("test" for the test split's scoring after the run) of an iteration."""

    candidate: dict[str, str]
    example: Any
    phase: str
    iteration: int


@dataclass
class RolloutOutcome:
    """What one rollout did, on the clock it was given."""

    output: str
    score: float
    feedback: str
    record: dict[str, str]
    start: float
    end: float
    error: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    attempts: int = 1
    failed: list[FailedAttempt] = field(default_factory=list)  # numbered across its LM calls
    node: str | None = None  # where it ran, when a Ray worker ran it
    task_id: str | None = None


# on_failure(slot, failed attempt): told of every failed LM try of a rollout.
OnFailure = Callable[[int, FailedAttempt], None]


class RolloutPool(Protocol):
    """Where rollouts run: at most `workers` at once, each on a slot 0..workers-1."""

    workers: int

    def run(
        self, requests: Sequence[RolloutRequest], clock: Callable[[], float], on_failure: OnFailure
    ) -> Iterator[tuple[int, int, RolloutOutcome]]:
        """Yield (request index, slot, outcome) as each request finishes, times on `clock`."""
        ...

    def meta(self) -> dict[str, Any]:
        """What run_start's meta records of the pool."""
        ...

    def close(self) -> None: ...


def run_rollout(
    task: Task,
    lm: ChatModel,
    request: RolloutRequest,
    clock: Callable[[], float],
    on_failure: Callable[[FailedAttempt], None] = lambda failed: None,
) -> RolloutOutcome:
    """Run the task's program and metric on one example, in a thread or a Ray worker: each
    failed LM try goes to `on_failure` and `RolloutOutcome.failed`; a call that still
    fails, or a program or metric that raises, scores 0 with its error."""
    failed_tries: list[FailedAttempt] = []
    usage = _Usage()
    site = CallSite(request.phase, request.iteration)

    def note_failure(failed: FailedAttempt) -> None:
        # A rollout may make several LM calls: its tries are numbered across them.
        numbered = replace(failed, attempt=usage.attempts + failed.attempt)
        failed_tries.append(numbered)
        on_failure(numbered)

    def call_lm(messages: list[dict[str, Any]], **kwargs: Any) -> str:
        merged = {**task.lm_kwargs, **kwargs}
        try:
            reply, attempts = lm.complete(
                messages, clock=clock, on_failure=note_failure, site=site, **merged
            )
        except CallFailed as exc:
            usage.attempts += exc.attempts
            raise
        usage.add(reply, attempts)
        return reply.text

    start = clock()
    error: str | None = None
    try:
        output = task.program(request.candidate, request.example, call_lm)
        fb = task.metric(request.example, output)
    except Exception as exc:  # an LM call failed for good, or the user's code raised: go on
        error = exc.error if isinstance(exc, CallFailed) else describe_error(exc)
        output, fb = "", Feedback(0.0, f"The program failed: {error}")
    end = clock()
    record = (
        task.record(request.example, output, fb)
        if task.record is not None
        else {"Input": str(request.example), "Output": output, "Feedback": fb.feedback}
    )
    return RolloutOutcome(
        output=output,
        score=float(fb.score),
        feedback=fb.feedback,
        record=record,
        start=start,
        end=end,
        error=error,
        tokens_in=usage.tokens_in,
        tokens_out=usage.tokens_out,
        cost=usage.cost,
        attempts=max(usage.attempts, 1),
        failed=failed_tries,
    )


@dataclass
class _Usage:
    """Tokens, cost and attempts of one rollout's LM calls (a program may make several)."""

    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    attempts: int = 0

    def add(self, reply: Any, attempts: int) -> None:
        self.attempts += attempts
        for name in ("tokens_in", "tokens_out", "cost"):
            told = getattr(reply, name)
            if told is not None:
                setattr(self, name, (getattr(self, name) or 0) + told)


class SlotThreads(ThreadPoolExecutor):
    """A thread pool whose threads each keep one slot id, 0..workers-1, for life."""

    def __init__(self, workers: int, prefix: str):
        slots, self._slot_of = itertools.count(), threading.local()
        super().__init__(
            workers, prefix, initializer=lambda: setattr(self._slot_of, "slot", next(slots))
        )

    @property
    def slot(self) -> int:
        """The slot of the calling thread, one of the pool's."""
        return self._slot_of.slot

    def close(self) -> None:
        self.shutdown(wait=False, cancel_futures=True)


class ThreadRollouts:
    """W threads in this process, each keeping one slot id for its life (--backend local)."""

    def __init__(self, task: Task, lm: ChatModel, workers: int):
        self.task = task
        self.lm = lm
        self.workers = workers
        self._threads = SlotThreads(workers, "rollout")

    def _execute(
        self, request: RolloutRequest, clock: Callable[[], float], on_failure: OnFailure
    ) -> tuple[int, RolloutOutcome]:
        slot = self._threads.slot
        return slot, run_rollout(self.task, self.lm, request, clock, lambda f: on_failure(slot, f))

    def run(
        self, requests: Sequence[RolloutRequest], clock: Callable[[], float], on_failure: OnFailure
    ) -> Iterator[tuple[int, int, RolloutOutcome]]:
        futures = {
            self._threads.submit(self._execute, request, clock, on_failure): index
            for index, request in enumerate(requests)
        }
        for future in as_completed(futures):
            slot, outcome = future.result()
            yield futures[future], slot, outcome

    def meta(self) -> dict[str, Any]:
        return {"eval_backend": "local"}

    def close(self) -> None:
        self._threads.close()


class InstrumentedAdapter:
    """pxn's own gepa adapter for a `Task`: every stage's rollouts fanned out to the pool's W
    slots, each reported to the recording with its own times, slot, tokens and tries."""

    # gepa asks the adapter for `propose_new_texts` first: without this None it would
    # believe the adapter proposes texts itself, and every reflection would fail silently.
    propose_new_texts = None

    def __init__(self, task: Task, recording: Recording, pool: RolloutPool):
        self.task = task
        self.recording = recording
        self.pool = pool

    def evaluate(
        self, batch: list[Item], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch:
        # gepa 0.1.4 calls evaluate() only for the seed's validation and a merge's subsample.
        return self.batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(
        self, items: list[tuple[dict[str, str], list[Item]]], *, capture_traces: bool = True
    ) -> list[EvaluationBatch]:
        rec = self.recording
        phase, iteration = rec.phase, rec.iteration
        requests = [
            RolloutRequest(candidate, item.payload, phase, iteration)
            for candidate, batch in items
            for item in batch
        ]
        results: list[RolloutOutcome | None] = [None] * len(requests)
        on_failure = partial(report_failure, rec, "rollout")
        for index, slot, outcome in self.pool.run(requests, rec.clock, on_failure):
            results[index] = outcome
            rec.report_rollout(index, _report(outcome, slot))
        out, pos = [], 0
        for _, batch in items:
            chunk = results[pos : pos + len(batch)]
            pos += len(batch)
            out.append(
                EvaluationBatch(
                    outputs=[r.output for r in chunk],
                    scores=[r.score for r in chunk],
                    trajectories=[{"record": r.record, "feedback": r.feedback} for r in chunk],
                )
            )
        return out

    def make_reflective_dataset(
        self,
        candidate: dict[str, str],
        eval_batch: EvaluationBatch,
        components_to_update: list[str],
    ) -> dict[str, list[dict[str, str]]]:
        records = [traj["record"] for traj in (eval_batch.trajectories or [])]
        return {name: records for name in components_to_update}


def score_split(pool: RolloutPool, candidate: dict[str, str], examples: Sequence[Item]) -> float:
    """Mean score on held-out examples (the test split) on the pool's slots, outside gepa and
    the trace: a failed rollout scores 0, and nothing of it is written (so its times, on
    any clock, are dropped)."""
    requests = [RolloutRequest(candidate, item.payload, "test", 0) for item in examples]
    outcomes = pool.run(requests, time.perf_counter, lambda slot, failed: None)
    scores = [o.score for _, _, o in outcomes]
    return sum(scores) / len(scores) if scores else float("nan")


def report_failure(rec: Recording, call: str, slot: int, failed: FailedAttempt) -> None:
    """A failed try of a "rollout" or "reflection" LM call, told to the recording (a
    FailedAttempt's fields are report_attempt's other arguments)."""
    rec.report_attempt(call=call, slot=slot, **asdict(failed))


def _report(outcome: RolloutOutcome, slot: int) -> RolloutReport:
    """The outcome as the recording takes it: every field a RolloutReport has, on `slot`."""
    told = {f.name: getattr(outcome, f.name) for f in fields(RolloutReport) if f.name != "slot"}
    return RolloutReport(slot=slot, **told)
