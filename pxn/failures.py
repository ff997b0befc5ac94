"""Proposals lost before gepa judged them: how often, and at which step.

A real first run loses many proposals. gepa 0.1.4 evaluates the parent on its
minibatch, builds the reflective dataset, asks for the new texts and
evaluates the child; a proposal can be lost after the first step (paid for,
never judged) in two places:

- before its reflection (`dataset`): the adapter could not build the
  reflective dataset (DSPy's "No valid predictions found for any module"
  when every minibatch rollout failed to parse), or the parent's evaluation
  returned no trajectories. No reflection runs.
- in its reflection (`reflection`): the call raised (an LM error, a reply
  DSPy's proposer could not parse, an empty instruction) or returned no new
  text. gepa then throws the iteration's whole pass of reflections away and
  asks again for every task, one at a time, each failure now its task's
  alone. A task whose reflection failed fails again on the retry with chance
  `retry` (a weak model at a low temperature repeats itself: `retry` near 1),
  a task asked again after its first try succeeded with chance `reflection`.
  When the reflections run one at a time (C = 1: dspy.GEPA's adapter, a plain
  callable), the first pass stops at its first failure.

The proposal's parent minibatch, and its reflections, are paid for either
way; no child is evaluated. gepa reports none of this (it logs it and goes
on): the recorder writes each lost proposal as a `no_proposal` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.fields import known_keys, share, table


@dataclass(frozen=True)
class Failures:
    dataset: float = 0.0  # a task lost before its reflection
    reflection: float = 0.0  # a reflection call that gives no new text
    retry: float | None = None  # a failed task's retry failing too (None: as `reflection`)

    @property
    def any(self) -> bool:
        """Whether proposals are ever lost (a scenario without losses draws nothing for them)."""
        return self.dataset > 0 or self.reflection > 0

    @property
    def retry_failure(self) -> float:
        return self.reflection if self.retry is None else self.retry

    def validate(self) -> Failures:
        share(self.dataset, "failures.dataset")
        share(self.reflection, "failures.reflection")
        if self.retry is not None:
            share(self.retry, "failures.retry")
        return self

    def to_dict(self) -> dict[str, float]:
        """The [failures] table; empty for a scenario that loses nothing."""
        if not self.any:
            return {}
        data = {"dataset": self.dataset, "reflection": self.reflection}
        return data if self.retry is None else data | {"retry": self.retry}

    @classmethod
    def from_dict(cls, data: Any) -> Failures:
        fields = table(data, "[failures]")
        known_keys(fields, set(cls.__dataclass_fields__), "[failures]")
        return cls(**fields).validate()
