"""gepa.optimize's default adapter, built from `task_lm` as gepa 0.1.4 builds it, each rollout
timed where it runs.

Without an adapter gepa builds `DefaultAdapter(model=task_lm, evaluator=...)` out of the
recording's reach, so the recording builds the same one first. It evaluates pair after
pair, each call asking for its examples' replies at most `max_litellm_workers` (W) at
once, here each on its own thread so it is timed and metered alone; the evaluator scores
them after the last one, outside any rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from gepa.adapters.default_adapter.default_adapter import DefaultAdapter

from pxn.runner.recording.adapter_wrapper import AdapterAround, Items
from pxn.runner.recording.calls import RolloutReport
from pxn.runner.recording.lm_wrapper import MeteredLM, fan_out

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

    def batch_complete(
        self, messages_list: list[list[dict[str, Any]]], max_workers: int = 10, **kwargs: Any
    ) -> list[str]:
        if kwargs:  # litellm_batch_completion_kwargs, which gepa.optimize never sets: as gepa
            return super().batch_complete(messages_list, max_workers=max_workers, **kwargs)
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

    # gepa asks this first: None, as DefaultAdapter's, means the reflection LM proposes.
    propose_new_texts = None

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
