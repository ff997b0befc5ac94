"""Thin wrappers around the user's adapter, reflection LM and selection strategy.

Each forwards to the user's object on the caller's thread and tells the
recorder when a call begins and ends; none adds or removes concurrency. An
adapter's own `propose_new_texts` is a reflection: gepa calls it instead of
the reflection LM, one proposal at a time. gepa
chooses its code path by what an object has (`batch_evaluate` on the
adapter: one call per stage, else `evaluate` pair after pair; `batch_complete`
on the reflection LM: one call for all of a step's prompts, else one prompt at
a time), so each wrapper has exactly the methods its inner object has.

gepa wraps a reflection LM without `total_cost` in its `TrackingLM`, which
hides `batch_complete`; `wrap_reflection_lm` does the same first, so the
recorded run makes the same calls the unrecorded one would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gepa.core.adapter import EvaluationBatch
from gepa.lm import LM, TrackingLM

from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.recording.recorder import Recorder
from pxn.runner.recording.reports import ReflectionReport
from pxn.runner.redact import describe_error

T = TypeVar("T")


class RecordingAdapter:
    """The user's adapter, each `evaluate` call recorded (gepa falls back to it pair by pair)."""

    def __init__(self, inner: Any, recorder: Recorder, *, skip_seed_val: bool = False):
        self.inner = inner
        self.recorder = recorder
        # On resume gepa evaluates the seed again and then throws the result away for the
        # saved state: answering without running anything keeps the trace and the bill honest.
        self._skip_seed_val = skip_seed_val
        # gepa asks for this first: None means gepa's reflection LM proposes the texts.
        self.propose_new_texts = None
        if getattr(inner, "propose_new_texts", None) is not None:
            self.propose_new_texts = self._proposed
        for name in ("get_adapter_state", "set_adapter_state"):
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    def evaluate(self, batch: list[Any], candidate: dict[str, str], capture_traces: bool = False):
        if self._skip_seed_val and self.recorder.phase == "seed_val":
            self._skip_seed_val = False
            zeros = [0.0] * len(batch)
            return EvaluationBatch(outputs=[None] * len(batch), scores=zeros, trajectories=None)
        return self._recorded(
            [(candidate, batch)],
            lambda: [self.inner.evaluate(batch, candidate, capture_traces=capture_traces)],
        )[0]

    def make_reflective_dataset(self, candidate: Any, eval_batch: Any, components_to_update: Any):
        try:
            return self.inner.make_reflective_dataset(candidate, eval_batch, components_to_update)
        except Exception:
            self.recorder.reflective_dataset_failed()
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
            replies=lambda _: None,
        )

    def _recorded(self, items: list[tuple[dict[str, str], list[Any]]], call: Any) -> list[Any]:
        rec = self.recorder
        rec.begin_rollouts(items)
        try:
            results = call()
        except BaseException as exc:
            rec.end_rollouts(None, describe_error(exc))
            raise
        rec.end_rollouts([s for r in results for s in r.scores], None)
        return results


class BatchRecordingAdapter(RecordingAdapter):
    """An adapter with `batch_evaluate`: one recorded call per stage."""

    def batch_evaluate(self, items: list[tuple[dict[str, str], list[Any]]], **kwargs: Any):
        return self._recorded(items, lambda: self.inner.batch_evaluate(items, **kwargs))


def wrap_adapter(adapter: Any, recorder: Recorder, *, skip_seed_val: bool) -> RecordingAdapter:
    cls = BatchRecordingAdapter if hasattr(adapter, "batch_evaluate") else RecordingAdapter
    return cls(adapter, recorder, skip_seed_val=skip_seed_val)


class MeteredLM(LM):
    """gepa's own litellm LM (what gepa builds from a model string), telling each call's tokens
    and cost: gepa's LM only keeps totals, so the increments it adds under its lock are
    noted per thread, and every call runs on its own thread (`batch_complete` below)."""

    def __init__(self, model: str, **kwargs: Any):
        self._local = threading.local()
        super().__init__(model, **kwargs)

    def usage(self) -> tuple[int, int, float]:
        """Tokens in, out and cost added on this thread since the last `usage()` call."""
        got = getattr(self._local, "got", (0, 0, 0.0))
        self._local.got = (0, 0, 0.0)
        return got

    def _note(self, position: int, delta: float) -> None:
        got = list(getattr(self._local, "got", (0, 0, 0.0)))
        got[position] += delta
        self._local.got = tuple(got)

    @property  # type: ignore[override]
    def _total_tokens_in(self) -> int:
        return self.__dict__.get("_tin", 0)

    @_total_tokens_in.setter
    def _total_tokens_in(self, value: int) -> None:
        self._note(0, value - self.__dict__.get("_tin", 0))
        self.__dict__["_tin"] = value

    @property  # type: ignore[override]
    def _total_tokens_out(self) -> int:
        return self.__dict__.get("_tout", 0)

    @_total_tokens_out.setter
    def _total_tokens_out(self, value: int) -> None:
        self._note(1, value - self.__dict__.get("_tout", 0))
        self.__dict__["_tout"] = value

    @property  # type: ignore[override]
    def _total_cost(self) -> float:
        return self.__dict__.get("_cost", 0.0)

    @_total_cost.setter
    def _total_cost(self, value: float) -> None:
        self._note(2, value - self.__dict__.get("_cost", 0.0))
        self.__dict__["_cost"] = value


class RecordingLM:
    """The user's reflection LM, each call recorded; called one prompt at a time by gepa."""

    def __init__(self, inner: Any, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder

    # gepa reads these (for its cost stopper); the inner LM has them (see wrap_reflection_lm).
    @property
    def total_cost(self) -> float:
        return self.inner.total_cost

    @property
    def total_tokens_in(self) -> int:
        return self.inner.total_tokens_in

    @property
    def total_tokens_out(self) -> int:
        return self.inner.total_tokens_out

    def __call__(self, prompt: Any) -> str:
        return self._recorded(1, lambda: [self._one(0, prompt)])[0]

    def _one(self, index: int, prompt: Any) -> str:
        """One prompt on this thread; gepa's own LM tells its usage, reported here."""
        if not isinstance(self.inner, MeteredLM):
            return self.inner(prompt)
        rec = self.recorder
        start = rec.clock()
        self.inner.usage()
        try:
            text = self.inner(prompt)
        except Exception as exc:
            report = ReflectionReport(
                start=start, end=rec.clock(), prompt=prompt_text(prompt), error=describe_error(exc)
            )
            rec.report_reflection(index, report)
            raise
        tokens_in, tokens_out, cost = self.inner.usage()
        report = ReflectionReport(
            start=start,
            end=rec.clock(),
            text=text,
            prompt=prompt_text(prompt),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost=cost,
        )
        rec.report_reflection(index, report)
        return text

    def _recorded(self, count: int, call: Callable[[], list[str]]) -> list[str]:
        return reflections(self.recorder, count, call, replies=lambda texts: texts)


class BatchRecordingLM(RecordingLM):
    """A reflection LM with `batch_complete`: gepa hands it all of a step's prompts at once."""

    def batch_complete(self, messages_list: list[Any], **kwargs: Any) -> list[str]:
        if isinstance(self.inner, MeteredLM) and not kwargs:
            return self._recorded(len(messages_list), lambda: self._fan_out(messages_list))
        return self._recorded(
            len(messages_list), lambda: list(self.inner.batch_complete(messages_list, **kwargs))
        )

    def _fan_out(self, messages_list: list[Any]) -> list[str]:
        """What gepa's LM.batch_complete does (litellm.batch_completion: at most 10 calls at
        once, replies stripped), one call per thread so each is timed and metered alone."""
        with ThreadPoolExecutor(max_workers=GEPA_LM_BATCH_WORKERS) as pool:
            futures = [pool.submit(self._one, i, m) for i, m in enumerate(messages_list)]
            return [f.result().strip() for f in futures]


# gepa's LM.batch_complete default: litellm.batch_completion's max_workers.
GEPA_LM_BATCH_WORKERS = 10


def wrap_reflection_lm(
    lm: Any, recorder: Recorder, lm_kwargs: dict[str, Any] | None
) -> RecordingLM | None:
    """The reflection LM gepa would use, recorded: a model string becomes gepa's own LM (as
    gepa makes it), a callable without `total_cost` gepa's TrackingLM (as gepa wraps it)."""
    if lm is None:
        return None
    if isinstance(lm, str):
        inner: Any = MeteredLM(lm, **(lm_kwargs or {}))
    elif not hasattr(lm, "total_cost"):
        inner = TrackingLM(lm)
    else:
        inner = lm
    cls = BatchRecordingLM if hasattr(inner, "batch_complete") else RecordingLM
    return cls(inner, recorder)


def reflections(
    rec: Recorder,
    count: int,
    call: Callable[[], T],
    *,
    replies: Callable[[T], Sequence[str] | None],
) -> T:
    """`call()`, one reflection call of `count` jobs told to the recorder; `replies` reads the
    reply texts from its result."""
    rec.begin_reflections(count)
    try:
        result = call()
    except BaseException as exc:
        rec.end_reflections(None, describe_error(exc))
        raise
    rec.end_reflections(replies(result), None)
    return result


class RecordingSelection:
    """Wraps gepa's selection strategy to see every proposal and which were chosen."""

    def __init__(self, inner: Any, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder

    def select(self, proposals: list[Any], state: Any, acceptance_criterion: Any) -> list[Any]:
        chosen = self.inner.select(proposals, state, acceptance_criterion)
        self.recorder.selected(proposals, chosen)
        return chosen
