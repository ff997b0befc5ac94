"""How much of a reflection's prompt it shares with the previous prompt of its parent.

gepa's reflection prompt is its template's head, the parent's text, the
template's middle, then the minibatch's examples and the template's tail. So
two reflections of one parent (siblings in a step, or the parent's
reflections in different steps) share the head, the parent's text and the
middle, and part at the first example that differs. A server that keeps the
prompt it served last and reuses the prefix a new prompt shares with it
(llama-cpp-python's cache) then skips that prefix when it serves siblings
back to back; this counts the prefix for every reflection, whichever server
served the one before, so calibration can price what a shared server saves.

Assumptions: the prompt is the messages' contents joined by newlines (what
the server reads, up to its chat template); tokens spread evenly over the
prompt's characters, since the LM reports only the prompt's token count
(tokens_in): the prefix's tokens are prefix characters x tokens_in / prompt
characters. Only the last prompt of each parent is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


class SharedPrefixes:
    """The last prompt recorded for each parent, and the prefix the next one shares with it.

    Not thread-safe: the caller counts one parent's prompts in their order, one at a time.
    """

    def __init__(self) -> None:
        self._last: dict[str, str] = {}

    def tokens(self, parent: str | None, prompt: str | None, tokens_in: int | None) -> int | None:
        """The tokens of `prompt` before its first character that differs from the previous
        prompt of `parent`; None when there was none (the parent's first), when the prompt, its
        parent or its tokens_in is unknown. `prompt` becomes the parent's last."""
        if parent is None or prompt is None:
            return None
        previous = self._last.get(parent)
        self._last[parent] = prompt
        if previous is None or tokens_in is None or not prompt:
            return None
        return round(shared_prefix_chars(prompt, previous) * tokens_in / len(prompt))
