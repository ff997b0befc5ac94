"""The user's adapter and gepa's selection, each call recorded on the caller's thread.

gepa picks its path by what the adapter has (`batch_evaluate`: one call per stage, else
`evaluate` pair after pair), so the wrapper has exactly its methods; an adapter's own
`propose_new_texts` is a reflection, one proposal a call.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from gepa.core.adapter import EvaluationBatch

from pxn.errors import PxnError
from pxn.runner.recording.lm_wrapper import reflections
from pxn.runner.recording.recorder import Recorder
from pxn.runner.redact import describe_error

Items = list[tuple[dict[str, str], list[Any]]]  # gepa's (candidate, examples) pairs


class AdapterAround:
    """An adapter whose every evaluation of `inner`'s runs inside `_around(items, call)`,
    `call(items)` being gepa's call on the examples given (pairs as gepa passes them);
    gepa reaches the inner adapter's state (to save and resume it) through this one."""

    def __init__(self, inner: Any):
        self.inner = inner
        for name in ("get_adapter_state", "set_adapter_state"):
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    def evaluate(self, batch: list[Any], candidate: dict[str, str], capture_traces: bool = False):
        def call(items: Items) -> list[Any]:
            return [self.inner.evaluate(items[0][1], candidate, capture_traces=capture_traces)]

        return self._around([(candidate, batch)], call)[0]

    def make_reflective_dataset(self, candidate: Any, eval_batch: Any, components_to_update: Any):
        return self.inner.make_reflective_dataset(candidate, eval_batch, components_to_update)

    def _around(self, items: Items, call: Callable[[Items], list[Any]]) -> list[Any]:
        raise NotImplementedError


class BatchAround(AdapterAround):
    """An adapter with `batch_evaluate`: gepa evaluates a stage in one call."""

    def batch_evaluate(self, items: Items, **kwargs: Any):
        return self._around(items, lambda given: self.inner.batch_evaluate(given, **kwargs))


class RecordingAdapter(AdapterAround):
    """The user's adapter, each call recorded (gepa falls back to `evaluate` pair by pair)."""

    def __init__(self, inner: Any, recorder: Recorder, *, skip_seed_val: bool = False):
        super().__init__(inner)
        self.recorder = recorder
        # On resume gepa evaluates the seed again and then throws the result away for the
        # saved state: answering without running anything keeps the trace and the bill honest.
        self._skip_seed_val = skip_seed_val
        # gepa asks for this first: None means gepa's reflection LM proposes the texts.
        self.propose_new_texts = None
        if getattr(inner, "propose_new_texts", None) is not None:
            self.propose_new_texts = self._proposed

    def evaluate(self, batch: list[Any], candidate: dict[str, str], capture_traces: bool = False):
        if self._skip_seed_val and self.recorder.phase == "seed_val":
            self._skip_seed_val = False
            zeros = [0.0] * len(batch)
            return EvaluationBatch(outputs=[None] * len(batch), scores=zeros, trajectories=None)
        return super().evaluate(batch, candidate, capture_traces)

    def make_reflective_dataset(self, candidate: Any, eval_batch: Any, components_to_update: Any):
        try:
            return self.inner.make_reflective_dataset(candidate, eval_batch, components_to_update)
        except Exception as exc:
            self.recorder.reflective_dataset_failed(describe_error(exc))
            raise

    def _proposed(
        self, candidate: dict[str, str], reflective_dataset: Any, components_to_update: list[str]
    ) -> dict[str, str]:
        """The adapter's own proposal, one reflection; no reply text (the adapter parses it)."""
        return reflections(
            self.recorder,
            1,
            lambda: self.inner.propose_new_texts(
                candidate, reflective_dataset, components_to_update
            ),
            texts=False,
        )

    def _around(self, items: Items, call: Callable[[Items], list[Any]]) -> list[Any]:
        rec = self.recorder
        rec.begin_rollouts(items)
        try:
            results = call(items)
        except BaseException as exc:
            rec.end_rollouts(None, describe_error(exc))
            raise
        problem = score_problem(items, results)
        if problem is not None:
            rec.end_rollouts(None, f"the adapter {problem}")
            raise PxnError(problem, subject="adapter")
        rec.end_rollouts([s for r in results for s in r.scores], None)
        return results


class BatchRecordingAdapter(RecordingAdapter, BatchAround):
    """An adapter with `batch_evaluate`: one recorded call per stage."""


def wrap_adapter(adapter: Any, recorder: Recorder, *, skip_seed_val: bool) -> RecordingAdapter:
    cls = BatchRecordingAdapter if hasattr(adapter, "batch_evaluate") else RecordingAdapter
    return cls(adapter, recorder, skip_seed_val=skip_seed_val)


def score_problem(items: Sequence[tuple[Any, Sequence[Any]]], results: Sequence[Any]) -> str | None:
    """What is wrong with an adapter call's `results` (one EvaluationBatch per pair of
    `items`), in words; None when each pair has one finite score per example. gepa takes
    them on trust: too few scores fail deep inside it or go unnoticed, and a NaN makes
    every comparison false, so the run accepts nothing."""
    if len(results) != len(items):
        return f"returned {len(results)} evaluation batches for {len(items)} candidates"
    for (_, batch), result in zip(items, results, strict=True):
        scores = list(getattr(result, "scores", None) or [])
        if len(scores) != len(batch):
            return (
                f"returned {len(scores)} scores for {len(batch)} examples: return one score "
                "per example, in the batch's order"
            )
        for score in scores:
            if not isinstance(score, numbers.Real):
                return f"returned the score {score!r}: each score is a number"
            if not math.isfinite(score):
                return f"returned the score {score!r}: gepa compares sums, so each is finite"
    return None


class RecordingSelection:
    """Wraps gepa's selection strategy to see every proposal and which were chosen."""

    def __init__(self, inner: Any, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder

    def select(self, proposals: list[Any], state: Any, acceptance_criterion: Any) -> list[Any]:
        chosen = self.inner.select(proposals, state, acceptance_criterion)
        self.recorder.selected(proposals, chosen)
        return chosen
