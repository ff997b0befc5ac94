"""Tokens per call: what dollars and tokens-per-minute limits are counted in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.distribution import Distribution
from pxn.fields import at_least, required_table, whole

DRAWN = ("rollout_input", "rollout_output", "reflection_output")
FIXED = ("reflection_input_base", "reflection_input_per_example")


@dataclass(frozen=True)
class Tokens:
    """A rollout's input and output tokens are drawn per call. A reflection's
    input is its prompt, the parent's text and one record per minibatch
    example, so it grows with b: base + per_example * b. Its latency was
    measured at b = `measured_minibatch`; at another b it shifts by
    seconds_per_input_token times the change in input (calibrate's
    latency-against-tokens fit; 0 when none was made).
    """

    rollout_input: Distribution
    rollout_output: Distribution
    reflection_output: Distribution
    reflection_input_base: float
    reflection_input_per_example: float
    measured_minibatch: int
    reflection_seconds_per_input_token: float = 0.0

    def reflection_input(self, minibatch: int) -> float:
        return self.reflection_input_base + self.reflection_input_per_example * minibatch

    def reflection_latency_shift(self, minibatch: int) -> float:
        """Seconds a reflection at this b takes beyond one at the measured b."""
        extra_input = self.reflection_input_per_example * (minibatch - self.measured_minibatch)
        return self.reflection_seconds_per_input_token * extra_input

    def mean_call(self, role: str, minibatch: int) -> tuple[float, float]:
        """(tokens in, tokens out) of a mean call: a rollout (task) or a reflection."""
        if role == "task":
            return self.rollout_input.mean(), self.rollout_output.mean()
        return self.reflection_input(minibatch), self.reflection_output.mean()

    def validate(self) -> None:
        for name in DRAWN:
            getattr(self, name).validate(f"tokens.{name}", unit="tokens")
        for name in (*FIXED, "reflection_seconds_per_input_token"):
            at_least(getattr(self, name), f"tokens.{name}")
        whole(self.measured_minibatch, "tokens.measured_minibatch")

    def to_dict(self) -> dict[str, Any]:
        return {
            "reflection_input_base": self.reflection_input_base,
            "reflection_input_per_example": self.reflection_input_per_example,
            "reflection_seconds_per_input_token": self.reflection_seconds_per_input_token,
            "measured_minibatch": self.measured_minibatch,
            **{name: getattr(self, name).to_dict() for name in DRAWN},
        }

    @classmethod
    def from_dict(cls, data: Any, minibatch: int) -> Tokens:
        """`minibatch`: the scenario's b, the measured one unless the table says otherwise."""
        fields = required_table(data, set(cls.__dataclass_fields__), [*DRAWN, *FIXED], "[tokens]")
        values = {**fields, "measured_minibatch": fields.get("measured_minibatch", minibatch)}
        for name in DRAWN:
            values[name] = Distribution.from_dict(fields[name], f"tokens.{name}", unit="tokens")
        return cls(**values)
