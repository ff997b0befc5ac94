"""optimize_anything's own adapter, reached and timed: each evaluator call one timed rollout.

optimize_anything (gepa 0.1.4) looks its OptimizeAnythingAdapter class up in its module
when it builds the engine: that lookup is the only seam. While a recorded run is set up,
the name stands for `AdapterSeam.build`, which hands the recording's run (found by its
run_dir) gepa's own adapter, timed and then recorded as any user's; other runs get it as
is (one recorded optimize_anything is set up at a time per process). An evaluator call is
found among the adapter call's pairs by the candidate's texts and the example's identity;
a batch_evaluator's rollouts span its call, untimed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import gepa.optimize_anything as gepa_anything

from pxn.errors import PxnError
from pxn.runner.recording.adapter_wrapper import BatchAround, Items
from pxn.runner.recording.calls import RolloutNote
from pxn.runner.recording.events import candidate_key

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

    # gepa asks the adapter for this first: None, as gepa's own, means the reflection LM.
    propose_new_texts = None

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
