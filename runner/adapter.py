"""The instrumented GEPA adapter: rollouts on exactly W worker slots, each one traced.

gepa hands `batch_evaluate` every (candidate, minibatch) pair of a stage at
once; the adapter fans the examples out to a pool of W threads, so at most W
rollouts run at any instant, and writes one Rollout event per metric call
(worker slot, phase, candidate, example, score, tokens, cost, error,
attempts). A rollout whose LM call still fails after its retries scores 0
with the error recorded, and the run goes on.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gepa.core.adapter import EvaluationBatch

from pxn.runner.lm import LMClient
from pxn.runner.recorder import Recorder
from pxn.runner.redact import describe_error
from pxn.runner.retry import CallFailed, FailedAttempt
from pxn.runner.tasks import Feedback, Task
from pxn.trace import Rollout, Stage


@dataclass(frozen=True)
class Item:
    """One example as gepa sees it: the task's own object plus a stable id with its split."""

    id: str  # "train/7", "val/2", "test/0"
    split: str
    payload: Any


def wrap_split(split: str, examples: Sequence[Any]) -> list[Item]:
    return [Item(f"{split}/{i}", split, ex) for i, ex in enumerate(examples)]


@dataclass
class RolloutResult:
    output: str
    score: float
    feedback: str
    record: dict[str, str]


class _Usage:
    """Tokens, cost and attempts of one rollout's LM calls (a program may make several)."""

    def __init__(self) -> None:
        self.tokens_in: int | None = None
        self.tokens_out: int | None = None
        self.cost: float | None = None
        self.attempts = 0

    def add(self, reply: Any, attempts: int) -> None:
        self.attempts += attempts
        if reply.tokens_in is not None:
            self.tokens_in = (self.tokens_in or 0) + reply.tokens_in
        if reply.tokens_out is not None:
            self.tokens_out = (self.tokens_out or 0) + reply.tokens_out
        if reply.cost is not None:
            self.cost = (self.cost or 0.0) + reply.cost


class InstrumentedAdapter:
    # Pitfall 1: without this attribute gepa believes the adapter proposes texts
    # itself, and every reflection fails silently.
    propose_new_texts = None

    def __init__(self, task: Task, lm: LMClient, recorder: Recorder, workers: int):
        self.task = task
        self.lm = lm
        self.recorder = recorder
        self.workers = workers
        self._slots = itertools.count()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="rollout", initializer=self._init_slot
        )
        self.skip_seed_val = False  # resume: gepa discards the seed evaluation (see run.py)
        self.rollouts = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost: float | None = None
        self._count_lock = threading.Lock()

    def _init_slot(self) -> None:
        # Each of the W threads keeps one slot id for its life: the trace's worker id.
        self._local.slot = next(self._slots)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- gepa's adapter interface ----

    def evaluate(
        self, batch: list[Item], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch:
        # gepa 0.1.4 calls evaluate() only for the seed's validation (merge is off).
        if self.skip_seed_val:
            # On resume gepa evaluates the seed and then throws the result away for
            # the saved state; answering without LM calls keeps the trace honest.
            self.skip_seed_val = False
            zeros = [0.0] * len(batch)
            return EvaluationBatch(outputs=[""] * len(batch), scores=zeros, trajectories=None)
        return self._run_stage([(candidate, batch)], "seed_val", iteration=0)[0]

    def batch_evaluate(
        self, items: list[tuple[dict[str, str], list[Item]]], *, capture_traces: bool = True
    ) -> list[EvaluationBatch]:
        # Pitfall 5: no phase is passed in. A batch of valset items is a validation
        # (gepa's full validation of selected children); otherwise the last
        # evaluation callback said parent or child minibatch.
        is_val = any(item.split == "val" for _, batch in items for item in batch)
        phase = "full_val" if is_val else self.recorder.book.expect
        return self._run_stage(items, phase, iteration=self.recorder.iteration)

    def make_reflective_dataset(
        self,
        candidate: dict[str, str],
        eval_batch: EvaluationBatch,
        components_to_update: list[str],
    ) -> dict[str, list[dict[str, str]]]:
        records = [traj["record"] for traj in (eval_batch.trajectories or [])]
        return {name: records for name in components_to_update}

    # ---- the fan-out ----

    def _run_stage(
        self, items: list[tuple[dict[str, str], list[Item]]], phase: str, iteration: int
    ) -> list[EvaluationBatch]:
        rec = self.recorder
        rec.batch_started(phase)
        start = rec.clock()
        jobs = []
        for candidate, batch in items:
            label = rec.candidate_label(candidate) if phase != "seed_val" else "0"
            for item in batch:
                jobs.append(
                    self._pool.submit(self._rollout, candidate, label, item, phase, iteration)
                )
        results = [job.result() for job in jobs]
        end = rec.clock()
        rec.write(Stage(start=start, end=end, iteration=iteration, name=phase))
        rec.batch_ended(phase, end)
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

    def _rollout(
        self, candidate: dict[str, str], label: str, item: Item, phase: str, iteration: int
    ) -> RolloutResult:
        rec = self.recorder
        slot = self._local.slot
        usage = _Usage()

        def on_failure(failed: FailedAttempt) -> None:
            # A rollout may make several LM calls: its tries are numbered across them.
            number = usage.attempts + failed.attempt
            rec.write_attempt(
                failed, iteration=iteration, call="rollout", phase=phase, slot=slot, number=number
            )

        def lm(messages: list[dict[str, Any]], **kwargs: Any) -> str:
            merged = {**self.task.lm_kwargs, **kwargs}
            try:
                reply, attempts = self.lm.complete(
                    messages, clock=rec.clock, on_failure=on_failure, **merged
                )
            except CallFailed as exc:
                usage.attempts += exc.attempts
                raise
            usage.add(reply, attempts)
            return reply.text

        start = rec.clock()
        error: str | None = None
        try:
            output = self.task.program(candidate, item.payload, lm)
            fb = self.task.metric(item.payload, output)
        except CallFailed as exc:
            output, error = "", exc.error
            fb = Feedback(0.0, f"The program failed: {exc.error}")
        except Exception as exc:  # the user's program or metric raised: score 0, go on
            output, error = "", describe_error(exc)
            fb = Feedback(0.0, f"The program failed: {error}")
        end = rec.clock()
        record = (
            self.task.record(item.payload, output, fb)
            if self.task.record is not None
            else {"Input": str(item.payload), "Output": output, "Feedback": fb.feedback}
        )
        rec.write(
            Rollout(
                start=start,
                end=end,
                iteration=iteration,
                phase=phase,
                worker=slot,
                candidate=label,
                example=item.id,
                score=float(fb.score),
                tokens_in=usage.tokens_in,
                tokens_out=usage.tokens_out,
                cost=usage.cost,
                error=error,
                attempts=max(usage.attempts, 1),
            )
        )
        with self._count_lock:
            self.rollouts += 1
            self.tokens_in += usage.tokens_in or 0
            self.tokens_out += usage.tokens_out or 0
            if usage.cost is not None:
                self.cost = (self.cost or 0.0) + usage.cost
        return RolloutResult(output, float(fb.score), fb.feedback, record)

    def score(self, candidate: dict[str, str], examples: Sequence[Item]) -> float:
        """Mean score on held-out examples (the test split), outside gepa and the trace."""
        futures = [self._pool.submit(self._plain, candidate, item) for item in examples]
        scores = [f.result() for f in futures]
        return sum(scores) / len(scores) if scores else float("nan")

    def _plain(self, candidate: dict[str, str], item: Item) -> float:
        def lm(messages: list[dict[str, Any]], **kwargs: Any) -> str:
            reply, _ = self.lm.complete(
                messages,
                clock=self.recorder.clock,
                on_failure=lambda f: None,
                **{**self.task.lm_kwargs, **kwargs},
            )
            return reply.text

        try:
            return float(
                self.task.metric(item.payload, self.task.program(candidate, item.payload, lm)).score
            )
        except Exception:
            return 0.0
