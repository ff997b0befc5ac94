"""How much of a reflection's prompt it shares with the previous prompt of its parent.

gepa's reflection prompt is its template's head, the parent's text, the
middle, then the minibatch's examples and the tail: two reflections of one
parent share everything up to the first differing example. A server that
reuses the prefix of the prompt it served last (llama-cpp-python's cache)
skips it; this counts it for every reflection so calibration can price it.
A job gepa asks again is compared with the parent's job before it. Tokens
are taken as spread evenly over the prompt's characters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def prompt_text(messages: str | Sequence[Mapping[str, Any]]) -> str:
    """A prompt as one text: a plain string, or the chat messages' contents joined by newlines."""
    if isinstance(messages, str):
        return messages
    return "\n".join(str(m.get("content", "")) for m in messages)


def shared_prefix_chars(a: str, b: str) -> int:
    """The characters of `a` before its first character that differs from `b`."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


@dataclass
class LastJob:
    """A parent's last reflection job and its prompt, and the prompt of its job before."""

    job: str
    prompt: str
    before: str | None


class SharedPrefixes:
    """The last prompts recorded for each parent, and the prefix the next one shares with
    them. Not thread-safe: the caller counts one parent's prompts in order."""

    def __init__(self) -> None:
        self._last: dict[str, LastJob] = {}

    def tokens(
        self, parent: str | None, job: str, prompt: str | None, tokens_in: int | None
    ) -> int | None:
        """The tokens of `prompt` (reflection job `job`, e.g. gepa's proposal id) before its first
        character that differs from the previous prompt of `parent` by another job; None when
        there was none (the parent's first job), when the prompt, its parent or its tokens_in
        is unknown. `prompt` becomes the parent's last."""
        if parent is None or prompt is None:
            return None
        last = self._last.get(parent)
        if last is None:
            previous = None
            self._last[parent] = LastJob(job, prompt, None)
        elif last.job == job:  # asked again: compare with the job before, as its first try was
            previous = last.before
            last.prompt = prompt
        else:
            previous = last.prompt
            self._last[parent] = LastJob(job, prompt, last.prompt)
        if previous is None or tokens_in is None or not prompt:
            return None
        return round(shared_prefix_chars(prompt, previous) * tokens_in / len(prompt))
