"""Prices: dollars per million tokens, and the one place dollars are computed.

A model name is priced from the JSON price table litellm ships, read without
importing litellm (which takes seconds and fetches the newest table over the
network): the same answer offline and on every machine with the same litellm.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pxn.errors import PxnError
from pxn.fields import at_least, table

PER_MILLION = 1_000_000
ROLES = ("task", "reflection")  # the model the rollouts run on, and the reflection model
PRICE_TABLE = "model_prices_and_context_window_backup.json"


@dataclass(frozen=True)
class Prices:
    """Dollars per million tokens, for the task model and the reflection model."""

    task_input: float
    task_output: float
    reflection_input: float
    reflection_output: float
    task_model: str = ""
    reflection_model: str = ""

    def dollars(self, role: str, tokens_in: float, tokens_out: float) -> float:
        """What `role`'s model charges for these tokens (role: task or reflection)."""
        if role == "task":
            return (tokens_in * self.task_input + tokens_out * self.task_output) / PER_MILLION
        return (
            tokens_in * self.reflection_input + tokens_out * self.reflection_output
        ) / PER_MILLION

    def validate(self) -> None:
        for name in ("task_input", "task_output", "reflection_input", "reflection_output"):
            at_least(getattr(self, name), f"prices.{name}", unit=" dollars per million tokens")

    def to_dict(self) -> dict[str, Any]:
        """The models' names, when known, then the four prices."""
        prices = asdict(self)
        names = {name: prices.pop(name) for name in ("task_model", "reflection_model")}
        return {k: v for k, v in names.items() if v} | prices

    @classmethod
    def from_dict(cls, data: Any) -> Prices:
        """Numbers given by hand win over a model's table prices; with nothing said
        about the reflection model, it is the task model, at its prices."""
        fields = table(data, "[prices]", set(cls.__dataclass_fields__))
        task_model = str(fields.get("task_model", ""))
        # The reflection is the task model's unless priced wholly by hand: then it has no name.
        by_hand = {"reflection_input", "reflection_output"} <= set(fields)
        reflection_model = str(fields.get("reflection_model", "" if by_hand else task_model))

        def side(role: str, model: str) -> tuple[float, float]:
            given = tuple(
                None
                if (v := fields.get(f"{role}_{io}")) is None
                else at_least(v, f"prices.{role}_{io}")
                for io in ("input", "output")
            )
            if None not in given:
                return given  # type: ignore[return-value]
            if not model:
                raise PxnError(
                    f"give {role}_input and {role}_output (dollars per million tokens) or "
                    f"{role}_model, a model name litellm prices",
                    subject="[prices]",
                )
            looked_up = model_prices(model)
            return tuple(g if g is not None else t for g, t in zip(given, looked_up, strict=True))  # type: ignore[return-value]

        task = side("task", task_model)
        said = {"reflection_model", "reflection_input", "reflection_output"} & set(fields)
        reflection = side("reflection", reflection_model) if said else task
        return cls(*task, *reflection, task_model, reflection_model)


@cache
def price_table() -> dict[str, Any]:
    """litellm's bundled price table, found on disk without importing litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise PxnError("pricing a model by name needs litellm installed; give prices by hand")
    path = Path(next(iter(spec.submodule_search_locations))) / PRICE_TABLE
    return json.loads(path.read_text(encoding="utf-8"))


def model_prices(model: str) -> tuple[float, float]:
    """(input, output) dollars per million tokens for `model` ("openai/gpt-4.1-mini", or
    without its provider prefix), as litellm's table prices it."""
    prices = price_table()
    entry = prices.get(model) or prices.get(model.split("/", 1)[-1])
    if not isinstance(entry, dict):
        names = [k for k in prices if k != "sample_spec"]
        close = difflib.get_close_matches(model, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise PxnError(
            f"is not in litellm's price table{hint} (or give its prices by hand, in dollars "
            "per million tokens)",
            subject=f"model {model!r}",
        )
    per_token = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if None in per_token:
        raise PxnError(
            "has no per-token prices in litellm's table; give them by hand, in dollars per "
            "million tokens",
            subject=f"model {model!r}",
        )
    # Rounded to micro-dollars: 4e-07 * 1e6 is 0.39999999999999997 in floating point.
    return round(per_token[0] * PER_MILLION, 6), round(per_token[1] * PER_MILLION, 6)
