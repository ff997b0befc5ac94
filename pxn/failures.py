"""Proposals lost before gepa judged them: how often, and at which step.

gepa 0.1.4 evaluates the parent on its minibatch, builds the reflective
dataset, asks for the new texts and evaluates the child. A proposal can be
lost, paid for and never judged, in two places:

- before its reflection (`dataset`): the reflective dataset could not be
  built (DSPy's "No valid predictions found for any module"), or the parent's
  evaluation returned no trajectories;
- in its reflection (`reflection`): the call raised or returned no new text.
  gepa then throws the iteration's pass of reflections away and asks again
  for every task one at a time; a failed task fails again with chance
  `retry`, one that succeeded with chance `reflection`. With C = 1 the first
  pass stops at its first failure.

gepa logs these and goes on; the recorder writes each as a `no_proposal` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.fields import share, table


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
        fields = table(data, "[failures]", set(cls.__dataclass_fields__))
        return cls(**fields).validate()
