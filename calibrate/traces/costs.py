"""The [prices] table, from litellm's offline price table for the models named, and the
dollars the traces recorded. A trace's `cost` does not say which price list produced it,
so without a model name no [prices] table is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pxn.errors import PxnError
from pxn.prices import Prices
from pxn.trace import Reflection, Rollout

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration


def lookup_prices(task_model: str | None, reflection_model: str | None) -> Prices | None:
    """Prices for the named models (the reflection model defaults to the task model)."""
    if reflection_model and not task_model:
        raise PxnError("needs a task model too (the model the rollouts ran on)",
                       subject="reflection model")  # fmt: skip
    if not task_model:
        return None
    table = {"task_model": task_model}
    if reflection_model:
        table["reflection_model"] = reflection_model
    return Prices.from_dict(table)


@dataclass(frozen=True)
class RecordedCosts:
    """What the traces' `cost` fields add up to, and the same calls at the given prices."""

    dollars: float  # every cost field, summed
    calls: int  # calls with a cost field
    compared: int  # of those, calls with both token counts (what `priced` covers)
    compared_dollars: float  # their recorded cost
    priced: float | None  # their tokens at the given prices; None without prices


def recorded_costs(
    rollouts: Sequence[Rollout], reflections: Sequence[Reflection], prices: Prices | None
) -> RecordedCosts:
    roles = ((rollouts, "task"), (reflections, "reflection"))
    costed = [(e, role) for events, role in roles for e in events if e.cost is not None]
    counted = [(e, r) for e, r in costed if e.tokens_in is not None and e.tokens_out is not None]
    priced = None
    if prices is not None:
        priced = sum((prices.dollars(r, e.tokens_in, e.tokens_out) for e, r in counted), 0.0)
    return RecordedCosts(
        dollars=sum((e.cost for e, _ in costed), 0.0),
        calls=len(costed),
        compared=len(counted),
        compared_dollars=sum((e.cost for e, _ in counted), 0.0),
        priced=priced,
    )


def price_lines(cal: Calibration) -> list[str]:
    prices, tokens, costs = cal.scenario.prices, cal.scenario.tokens, cal.costs
    if prices is None or tokens is None:
        return ["prices: none (--task-model NAME prices the tokens from litellm's table)"]
    b = cal.scenario.minibatch
    rollout = cal.scenario.mean_call_dollars("task")
    reflection = cal.scenario.mean_call_dollars("reflection")
    reflection_model = prices.reflection_model or "(by hand)"
    lines = [
        f"prices ($ per million tokens in / out, litellm's offline table): task "
        f"{prices.task_model} {prices.task_input:g} / {prices.task_output:g}, reflection "
        f"{reflection_model} {prices.reflection_input:g} / {prices.reflection_output:g}; "
        f"a mean rollout ${rollout:.3g}, a mean reflection at b={b} ${reflection:.3g}"
    ]
    if costs.compared_dollars > 0 and costs.priced is not None:
        lines.append(
            f"  the traces record ${costs.compared_dollars:.4g} for the {costs.compared} calls "
            f"with token counts; these prices give ${costs.priced:.4g} for them"
        )
    return lines
