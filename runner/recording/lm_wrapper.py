"""The user's reflection LM, each call recorded: one LM call, one recorded call of reflections.

The wrapper forwards on the caller's thread and has exactly the methods gepa would use of
the LM (gepa picks its path by `batch_complete`), so the recorded run makes the same
calls; a model string becomes gepa's own LM, metered call by call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from gepa.lm import LM, TrackingLM

from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.recording.calls import ReflectionReport
from pxn.runner.recording.recorder import Recorder
from pxn.runner.redact import describe_error

T = TypeVar("T")


class RecordingLM:
    """The user's reflection LM, each call recorded; called one prompt at a time by gepa."""

    def __init__(self, inner: Any, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder

    # gepa reads these (for its cost stopper); the inner LM has them (see wrap_reflection_lm).
    total_cost = property(lambda self: self.inner.total_cost)
    total_tokens_in = property(lambda self: self.inner.total_tokens_in)
    total_tokens_out = property(lambda self: self.inner.total_tokens_out)

    def __call__(self, prompt: Any) -> str:
        return self._recorded(1, lambda: [self._one(0, prompt)])[0]

    def _one(self, index: int, prompt: Any) -> str:
        """One prompt on this thread; gepa's own LM tells its usage, reported here."""
        if not isinstance(self.inner, MeteredLM):
            return self.inner(prompt)
        rec = self.recorder
        start, told = rec.clock(), None
        try:
            text, (tokens_in, tokens_out, cost) = self.inner.metered(prompt)
            told = {"text": text, "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost}
        except Exception as exc:
            told = {"error": describe_error(exc)}
            raise
        finally:
            if told is not None:  # None: interrupted (Ctrl-C), nothing to report
                prompt_seen = prompt_text(prompt)
                report = ReflectionReport(start, rec.clock(), prompt=prompt_seen, **told)
                rec.reflections.report(index, report)
        return text

    def _recorded(self, count: int, call: Callable[[], list[str]]) -> list[str]:
        return reflections(self.recorder, count, call, texts=True)


class BatchRecordingLM(RecordingLM):
    """A reflection LM with `batch_complete`: all of an iteration's prompts in one call."""

    def batch_complete(self, messages_list: list[Any], **kwargs: Any) -> list[str]:
        if isinstance(self.inner, MeteredLM) and not kwargs:
            one_by_one = partial(fan_out, self._one, messages_list, GEPA_LM_BATCH_WORKERS)
            return self._recorded(len(messages_list), one_by_one)
        return self._recorded(
            len(messages_list), lambda: list(self.inner.batch_complete(messages_list, **kwargs))
        )


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


def reflections(rec: Recorder, count: int, call: Callable[[], T], *, texts: bool) -> T:
    """`call()`, one reflection call of `count` jobs told to the recorder; its result is the
    replies' texts when `texts` (else the recorder learns none)."""
    rec.begin_reflections(count)
    try:
        result = call()
    except BaseException as exc:
        rec.end_reflections(None, describe_error(exc))
        raise
    rec.end_reflections(result if texts else None, None)
    return result


# gepa's LM.batch_complete default: litellm.batch_completion's max_workers.
GEPA_LM_BATCH_WORKERS = 10


def fan_out(one: Callable[[int, Any], str], messages_list: list[Any], workers: int) -> list[str]:
    """What gepa's LM.batch_complete does (litellm.batch_completion: at most `workers` calls at
    once, replies stripped, every call run to its end before the first failure is raised),
    `one(index, messages)` per thread so each call is timed and metered alone."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, i, m) for i, m in enumerate(messages_list)]
        return [f.result().strip() for f in futures]


def _metered(key: str, position: int, zero: float) -> property:
    """A total of gepa's LM whose every increment is also noted for the thread that adds it."""

    def get(self: MeteredLM) -> float:
        return self.__dict__.get(key, zero)

    def set(self: MeteredLM, value: float) -> None:
        got = list(getattr(self._local, "got", (0, 0, 0.0)))
        got[position] += value - self.__dict__.get(key, zero)
        self._local.got = tuple(got)
        self.__dict__[key] = value

    return property(get, set)


class MeteredLM(LM):
    """gepa's own litellm LM (what gepa builds from a model string), telling each call's tokens
    and cost: gepa's LM only keeps totals, so the increments it adds under its lock are
    noted per thread, and every call runs on its own thread (`batch_complete` below)."""

    def __init__(self, model: str, **kwargs: Any):
        self._local = threading.local()
        super().__init__(model, **kwargs)

    def metered(self, prompt: Any) -> tuple[str, tuple[int, int, float]]:
        """`prompt` answered on this thread, and the tokens in, out and cost the call added."""
        self._local.got = (0, 0, 0.0)  # this thread's count starts at this call
        return self(prompt), self._local.got

    _total_tokens_in = _metered("_tin", 0, 0)
    _total_tokens_out = _metered("_tout", 1, 0)
    _total_cost = _metered("_cost", 2, 0.0)
