"""The tokens and prompts of DSPy's LM calls, seen through DSPy's usage tracker and callbacks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.usage_tracker import UsageTracker

from pxn.runner.prompt_prefix import prompt_text


class SharedUsage(UsageTracker):
    """DSPy's usage tracker, shared with the threads DSPy starts (it gives each thread a copy
    of the tracker in force, so a rollout's calls would be lost to the rollout)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedUsage:
        return self

    def tokens(self) -> tuple[int | None, int | None]:
        """Prompt and completion tokens; None when no call was billed (none was made, or DSPy's
        cache answered every one)."""
        totals = self.get_total_tokens().values()
        if not totals:
            return None, None
        return (
            sum(t.get("prompt_tokens") or 0 for t in totals),
            sum(t.get("completion_tokens") or 0 for t in totals),
        )


@contextmanager
def lm_usage() -> Iterator[SharedUsage]:
    """The LM usage of the DSPy code run in the block, on this thread and the threads it starts."""
    usage = SharedUsage()
    with dspy.context(usage_tracker=usage):
        yield usage


class PromptsSeen(BaseCallback):
    """DSPy callbacks noting the prompt of each LM call made while they are in force."""

    def __init__(self) -> None:
        self._prompts: list[str] = []
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        messages = inputs.get("messages") or inputs.get("prompt")
        if messages is not None:
            with self._lock:
                self._prompts.append(prompt_text(messages))

    def text(self) -> str | None:
        """The prompts joined in call order; None when no LM call was seen."""
        with self._lock:
            return "\n".join(self._prompts) if self._prompts else None


@contextmanager
def lm_prompts() -> Iterator[PromptsSeen]:
    """The prompts of the DSPy LM calls made in the block."""
    seen = PromptsSeen()
    with dspy.context(callbacks=[*dspy.settings.get("callbacks", []), seen]):
        yield seen
