"""The adapters gepa calls, recorded on the caller's thread: the user's, and gepa's own
(gepa.optimize's default adapter, optimize_anything's) timed where they run; and gepa's
selection, wrapped to tell every proposal and which were chosen.

gepa picks its path by what the adapter has (`batch_evaluate`: one call per stage, else
`evaluate` pair after pair), so the wrapper has exactly its methods; an adapter's own
`propose_new_texts` is a reflection, one proposal a call.

Without an adapter gepa.optimize builds `DefaultAdapter(model=task_lm, evaluator=...)` out
of the recording's reach, so the recording builds the same one first. It evaluates pair
after pair, each call asking for its examples' replies at most `max_litellm_workers` (W)
at once, here each on its own thread so it is timed and metered alone; the evaluator
scores them after the last one, outside any rollout.

optimize_anything (gepa 0.1.4) looks its OptimizeAnythingAdapter class up in its module
when it builds the engine: that lookup is the only seam. While a recorded run is set up,
the name stands for `AdapterSeam.build`, which hands the recording's run (found by its
run_dir) gepa's own adapter, timed and then recorded as any user's; other runs get it as
is (one recorded optimize_anything is set up at a time per process). An evaluator call is
found among the adapter call's pairs by the candidate's texts and the example's identity;
a batch_evaluator's rollouts span its call, untimed.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import gepa.optimize_anything as gepa_anything
from gepa.adapters.default_adapter.default_adapter import DefaultAdapter
from gepa.core.adapter import EvaluationBatch

from pxn.errors import PxnError
from pxn.runner.recording.calls import RolloutNote, RolloutReport
from pxn.runner.recording.events import candidate_key
from pxn.runner.recording.lm_wrapper import MeteredLM, fan_out, reflections
from pxn.runner.recording.recorder import Recorder
from pxn.runner.redact import describe_error

Items = list[tuple[dict[str, str], list[Any]]]  # gepa's (candidate, examples) pairs


class AdapterAround:
    """An adapter whose every evaluation of `inner`'s runs inside `_around(items, call)`,
    `call(items)` being gepa's call on the examples given (pairs as gepa passes them);
    gepa reaches the inner adapter's state (to save and resume it) through this one."""

    # gepa asks for this first: None means gepa's reflection LM proposes the texts.
    propose_new_texts: Any = None

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


# The replies of the adapter call in flight by example position, each the rollout of its
# example but for the score (set from the call's threads: an item assignment is atomic).
Replies = dict[int, RolloutReport]


class TimedTaskLM(MeteredLM):
    """gepa's LM for the task model (as DefaultAdapter makes it from a model string), each
    reply of a batch made on its own thread and timed."""

    def __init__(self, model: str, clock: Callable[[], float]):
        super().__init__(model)
        self._clock = clock
        self.replies: Replies | None = None  # set by the adapter for each call

    def batch_complete(  # no litellm_batch_completion_kwargs: the recording built the adapter
        self, messages_list: list[list[dict[str, Any]]], max_workers: int = 10
    ) -> list[str]:
        return fan_out(partial(self._one, replies=self.replies), messages_list, max_workers)

    def _one(self, index: int, messages: list[dict[str, Any]], replies: Replies | None) -> str:
        start = self._clock()
        text, (tokens_in, tokens_out, cost) = self.metered(messages)
        if replies is not None:
            end = self._clock()
            reply = RolloutReport(start, end, tokens_in=tokens_in, tokens_out=tokens_out, cost=cost)
            replies[index] = reply
        return text


class TimedModelCall:
    """A callable task model, as DefaultAdapter calls it (one message list after another,
    the first raise ending the adapter call), each call timed."""

    def __init__(self, model: Callable[..., str], clock: Callable[[], float]):
        self.model = model
        self._clock = clock
        self.replies: Replies | None = None  # set by the adapter for each call

    def __call__(self, messages: Any) -> str:
        start = self._clock()
        text = self.model(messages)
        if self.replies is not None:  # the call's position: one after the replies so far
            self.replies[len(self.replies)] = RolloutReport(start=start, end=self._clock())
        return text


class TimedDefaultAdapter(AdapterAround):
    """The DefaultAdapter gepa.optimize builds from `task_lm` and `evaluator`, each rollout
    reported to `recording` with its own times and the evaluator's score."""

    def __init__(self, task_lm: Any, evaluator: Any, recording: Any):
        inner = DefaultAdapter(model=task_lm, evaluator=evaluator)
        super().__init__(inner)
        self.recording = recording
        self.max_litellm_workers = inner.max_litellm_workers
        self._model: TimedTaskLM | TimedModelCall
        if isinstance(task_lm, str):
            self.label = task_lm  # the task model as run_start's meta names it
            self._model = inner._lm = TimedTaskLM(task_lm, recording.clock)
        else:
            self.label = type(task_lm).__name__
            self._model = inner.model = TimedModelCall(task_lm, recording.clock)

    def _around(self, items: Items, call: Callable[[Items], list[Any]]) -> list[Any]:
        replies: Replies = {}
        self._model.replies = replies
        [result] = call(items)
        for index, reply in sorted(replies.items()):
            score = result.scores[index] if index < len(result.scores) else None
            self.recording.report_rollout(index, replace(reply, score=score))
        return [result]


MINIBATCH_PHASES = ("parent_minibatch", "child_minibatch")

_running = threading.local()  # the note of the rollout timed on this thread, while it runs


def running_note() -> RolloutNote | None:
    """The note of the rollout being timed on this thread (an evaluator call), else None."""
    return getattr(_running, "note", None)


class Pairs:
    """The (candidate, example) pairs of the adapter call in flight, flattened in gepa's order;
    each evaluation claims its position once."""

    def __init__(self, items: list[tuple[dict[str, str], list[Any]]]):
        self._lock = threading.Lock()
        self._free: dict[tuple[Any, int], list[int]] = {}
        position = 0
        for candidate, batch in items:
            key = candidate_key(candidate)
            for example in batch:
                self._free.setdefault((key, id(example)), []).append(position)
                position += 1

    def claim(self, candidate: dict[str, str], example: Any) -> int | None:
        with self._lock:
            free = self._free.get((candidate_key(candidate), id(example)))
            return free.pop(0) if free else None


class TimedAnythingAdapter(BatchAround):
    """gepa's OptimizeAnythingAdapter, as gepa calls it, with each evaluator call (or, with a
    refiner, each example's loop) timed as the rollout of its pair."""

    def __init__(self, inner: Any, recording: Any):
        super().__init__(inner)
        self.recording = recording
        self.refined_calls = 0  # minibatch evaluations gepa counted beyond one per example
        self._pairs: Pairs | None = None
        if inner.refiner_config is not None:
            inner._evaluate_single_with_refinement = self._timed(
                inner._evaluate_single_with_refinement
            )
        elif inner.evaluator is not None:
            inner.evaluator = self._timed(inner.evaluator)

    def _around(self, items: Items, call: Callable[[Items], list[Any]]) -> list[Any]:
        self._pairs = Pairs(items)
        try:
            results = call(items)
        finally:
            self._pairs = None
        if self.recording.phase in MINIBATCH_PHASES:
            for (_, batch), result in zip(items, results, strict=False):
                counted = result.num_metric_calls
                if counted is not None:
                    self.refined_calls += max(0, counted - len(batch))
        return results

    def _timed(self, evaluation: Callable[..., Any]) -> Callable[..., Any]:
        """`evaluation(candidate, example, ...)` (gepa's call, positional or by keyword) timed
        as the rollout of its pair; its result's first item is the score."""

        def timed(candidate: dict[str, str], *args: Any, **kwargs: Any) -> Any:
            example = args[0] if args else kwargs.get("example")
            pairs = self._pairs
            index = None if pairs is None else pairs.claim(candidate, example)
            if index is None:  # not a pair of the call in flight: run it as gepa would
                return evaluation(candidate, *args, **kwargs)
            with self.recording.rollout(index) as note:
                _running.note = note
                try:
                    result = evaluation(candidate, *args, **kwargs)
                finally:
                    _running.note = None
                note.score = result[0]
            return result

        return timed


class LessRefinements:
    """gepa's state as the recording's check reads it: its metric calls less the refiner's
    minibatch evaluations counted inside rollouts (TimedAnythingAdapter.refined_calls)."""

    def __init__(self, state: Any, refined: int):
        self._state = state
        self.total_num_evals = state.total_num_evals - refined

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


_ONE_AT_A_TIME = threading.Lock()


class AdapterSeam:
    """optimize_anything's adapter class, stood in for while one recorded run is set up."""

    def __init__(self, run_dir: str, recorded: Callable[[TimedAnythingAdapter], Any], rec: Any):
        self.run_dir = run_dir
        self._recorded = recorded  # the timed adapter -> the adapter gepa gets (recorded)
        self._rec = rec
        self._original: Any = None
        self.timed: TimedAnythingAdapter | None = None

    def install(self) -> None:
        if not _ONE_AT_A_TIME.acquire(blocking=False):
            raise PxnError(
                "is already being set up in this process: record one optimize_anything run at "
                "a time",
                subject="a recorded optimize_anything run",
            )
        self._original = gepa_anything.OptimizeAnythingAdapter
        gepa_anything.OptimizeAnythingAdapter = self.build

    def remove(self) -> None:
        if self._original is None:
            return
        gepa_anything.OptimizeAnythingAdapter = self._original
        self._original = None
        _ONE_AT_A_TIME.release()

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """gepa's adapter, made as gepa asked; timed and recorded when it is the recording's."""
        original = self._original or gepa_anything.OptimizeAnythingAdapter
        adapter = original(*args, **kwargs)
        if self.timed is not None or str(kwargs.get("cache_dir")) != self.run_dir:
            return adapter  # another run in this process: left as gepa made it
        self.remove()
        self.timed = TimedAnythingAdapter(adapter, self._rec)
        return self._recorded(self.timed)
