"""What the user's parts report to the recording: a rollout, a reflection, as they saw it.

Times are on the recording's clock (`rec.clock()`); a field left None is written
as unknown.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RolloutReport:
    """One rollout as the part that ran it saw it; times on the recording's clock."""

    start: float
    end: float
    score: float | None = None
    slot: int | None = None  # its own slot (the trace's worker); None: the recorder assigns one
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1
    node: str | None = None
    task_id: str | None = None


@dataclass(frozen=True)
class ReflectionReport:
    """One reflection LM call as the LM saw it; times on the recording's clock."""

    start: float
    end: float
    text: str | None = None  # the reply (None when the call failed)
    slot: int | None = None
    # The prompt as one text (prompt_text); None when unseen. Never written: prompts may
    # hold user data, so only the prefix it shares with its parent's last prompt is counted.
    prompt: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1


@dataclass
class RolloutNote:
    """What a rollout timed by `rec.rollout` tells besides its times."""

    score: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    attempts: int = 1
