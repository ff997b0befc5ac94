"""Plain gepa parts for the recorder's tests: sleep-free, deterministic, no pxn code inside.

The task: each example is a word; a candidate scores 1 on it when its one
component ("words") contains the word. The reflection LM appends the next
unused word of the vocabulary in ``` fences, so some children beat their
parents and gepa accepts them.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gepa.core.adapter import EvaluationBatch

VOCAB = [f"w{i}" for i in range(40)]
TRAIN = [VOCAB[i % 12] for i in range(12)]
VAL = [VOCAB[i] for i in range(6)]
SEED = {"words": "w0"}


def score(candidate: dict[str, str], example: str) -> float:
    return 1.0 if example in candidate["words"].split() else 0.0


class SerialAdapter:
    """No batch_evaluate: gepa calls evaluate pair after pair, and it loops serially."""

    propose_new_texts = None

    def __init__(self, fail_on: str | None = None):
        self.fail_on = fail_on  # an example whose rollout raises
        self.calls = 0

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False):
        self.calls += 1
        if self.fail_on is not None and self.fail_on in batch:
            raise RuntimeError(f"the adapter broke on {self.fail_on}")
        scores = [score(candidate, ex) for ex in batch]
        trajectories = [{"example": ex, "score": s} for ex, s in zip(batch, scores, strict=True)]
        return EvaluationBatch(outputs=list(batch), scores=scores, trajectories=trajectories)

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        records = [
            {"Inputs": t["example"], "Feedback": "ok" if t["score"] else "missing"}
            for t in eval_batch.trajectories or []
        ]
        return {name: records for name in components_to_update}


class ThreadedAdapter(SerialAdapter):
    """batch_evaluate on W threads. With `meet` set, every W rollouts wait for each other at
    a barrier, so they are in flight together for real; `recording` set, each rollout is
    timed where it runs (the adapter sees single rollouts, gepa does not)."""

    def __init__(self, workers: int, *, meet: bool = False, recording: Any = None):
        super().__init__()
        self.workers = workers
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.barrier = threading.Barrier(workers) if meet else None
        self.recording = recording

    def _one(self, index: int, candidate: dict[str, str], example: str) -> float:
        if self.recording is None:
            return self._run(candidate, example)
        with self.recording.rollout(index) as note:
            note.score = self._run(candidate, example)
        return note.score

    def _run(self, candidate: dict[str, str], example: str) -> float:
        if self.barrier is not None:
            self.barrier.wait(timeout=30)
        return score(candidate, example)

    def evaluate(self, batch, candidate, capture_traces=False):
        return self.batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(self, items, **kwargs):
        self.calls += 1
        jobs = [(c, ex) for c, batch in items for ex in batch]
        # A barrier needs whole groups of W: the last group is topped up with spare work.
        futures = [self.pool.submit(self._one, i, c, ex) for i, (c, ex) in enumerate(jobs)]
        spare = (-len(jobs)) % self.workers if self.barrier is not None else 0
        extra = [self.pool.submit(self.barrier.wait, 30) for _ in range(spare)]
        scores = [f.result() for f in futures]
        for f in extra:
            f.result()
        out, pos = [], 0
        for _, batch in items:
            chunk = scores[pos : pos + len(batch)]
            pos += len(batch)
            trajectories = [{"example": ex, "score": s} for ex, s in zip(batch, chunk, strict=True)]
            out.append(
                EvaluationBatch(outputs=list(batch), scores=chunk, trajectories=trajectories)
            )
        return out


def with_next_word(words: list[str]) -> str:
    """The words plus the first vocabulary word they lack."""
    return " ".join([*words, next(w for w in VOCAB if w not in words)])


def next_words(prompt: str) -> str:
    """The reflection: the current words plus the first vocabulary word they lack."""
    current = re.search(r"```\n?(.*?)\n?```", prompt, re.S)
    words = current.group(1).split() if current else []
    return "```\n" + with_next_word(words) + "\n```"


class FailOnce:
    """Raises on the `call`th call it counts (then never again), as a flaky reflection does."""

    def __init__(self, call: int):
        self.call = call
        self.calls = 0

    def count(self) -> None:
        self.calls += 1
        if self.calls == self.call:
            raise ConnectionError("the reflection model dropped the connection")


class ProposingAdapter(SerialAdapter):
    """Proposes the new texts itself (gepa then asks it, one proposal at a time, and never the
    reflection LM); `fail` raises on one of its calls."""

    def __init__(self, fail: FailOnce | None = None):
        super().__init__()
        self.fail = fail
        self.proposals = 0

    def propose_new_texts(self, candidate, reflective_dataset, components_to_update):
        self.proposals += 1
        if self.fail is not None:
            self.fail.count()
        return {name: with_next_word(candidate[name].split()) for name in components_to_update}


class StoppedAdapter(SerialAdapter):
    """batch_evaluate on `workers` threads, each rollout timed where it runs, that gets Ctrl-C
    in its first call: every rollout but the first waits for `release`; once `workers` of
    them wait (the first done), the rollouts not started are cancelled and KeyboardInterrupt
    raised while those wait, as DSPy's evaluation does at Ctrl-C."""

    def __init__(self, workers: int, recording: Any):
        super().__init__()
        self.recording = recording
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.workers = workers
        self.release = threading.Event()
        self.waiting = threading.Semaphore(0)
        self.started: list[int] = []

    def _one(self, index: int, candidate: dict[str, str], example: str) -> float:
        with self.recording.rollout(index) as note:
            self.started.append(index)
            if index > 0:
                self.waiting.release()
                self.release.wait(timeout=60)
            note.score = score(candidate, example)
        return note.score

    def batch_evaluate(self, items, **kwargs):
        jobs = [(c, ex) for c, batch in items for ex in batch]
        futures = [self.pool.submit(self._one, i, c, ex) for i, (c, ex) in enumerate(jobs)]
        futures[0].result()
        for _ in range(self.workers):
            self.waiting.acquire(timeout=60)
        self.pool.shutdown(wait=False, cancel_futures=True)
        raise KeyboardInterrupt

    def evaluate(self, batch, candidate, capture_traces=False):
        return self.batch_evaluate([(candidate, batch)])[0]


def _text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


class CallableLM:
    """A plain callable reflection LM (gepa calls it one prompt at a time); `fail`: always
    raises, or raises once (a FailOnce)."""

    def __init__(self, fail: bool | FailOnce = False):
        self.fail = fail
        self.calls = 0

    def __call__(self, prompt: Any) -> str:
        self.calls += 1
        if self.fail is True:
            raise ConnectionError("the reflection model is down")
        if isinstance(self.fail, FailOnce):
            self.fail.count()
        return next_words(_text(prompt))


class BatchLM:
    """A reflection LM with batch_complete and total_cost: gepa hands it all prompts at once."""

    total_cost = 0.0
    total_tokens_in = 0
    total_tokens_out = 0

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, prompt: Any) -> str:
        return next_words(_text(prompt))

    def batch_complete(self, messages_list):
        self.batches.append(len(messages_list))
        return [next_words(_text(m)) for m in messages_list]


class Counting:
    """A user's own gepa callback: it must keep seeing every event."""

    def __init__(self) -> None:
        self.iterations = 0
        self.budget_updates = 0
        self.skipped = 0  # tasks gepa skipped before their reflection

    def on_iteration_end(self, event):
        self.iterations += 1

    def on_budget_updated(self, event):
        self.budget_updates += 1

    def on_evaluation_skipped(self, event):
        self.skipped += 1


def check_prefixes(reflections: list[Any], chunks: int | None = None) -> int:
    """A recorded run's reflection events: of each parent's reflections with tokens_in, only
    its first job's (asked again after a failure or not) lack prefix_tokens, and every other
    shares part of its prompt with the parent's job before it (0 < prefix_tokens), all of it
    only where the two jobs share their minibatch too, and so their prompt: gepa gives task j
    of iteration i chunk (i - 1 + j) mod `chunks` of the padded trainset (None: more chunks
    than a step's tasks, so no two jobs share one). Returns how many have prefix_tokens."""

    def chunk(r: Any) -> int | None:
        task = int(r.proposal.partition("-")[2])
        return None if chunks is None else (r.iteration - 1 + task) % chunks

    by_parent: dict[str, list[Any]] = {}
    for r in reflections:
        if r.tokens_in is not None:
            by_parent.setdefault(r.parent, []).append(r)
    counted = 0
    for events in by_parent.values():
        assert len({r.proposal for r in events if r.prefix_tokens is None}) <= 1, events
        for k, r in enumerate(events):
            if r.prefix_tokens is None:
                continue
            before = next(e for e in reversed(events[:k]) if e.proposal != r.proposal)
            assert 0 < r.prefix_tokens <= r.tokens_in, r
            if r.prefix_tokens == r.tokens_in:
                assert chunk(r) is not None and chunk(r) == chunk(before), (before, r)
            counted += 1
    return counted
