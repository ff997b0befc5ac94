"""A budget as a gepa or DSPy user gives it, turned into B, the metric calls a run may spend.

Three spellings: metric calls (`400`, gepa's max_metric_calls), `auto:LEVEL`
(dspy.GEPA's `auto`) or `full-evals:N` (its `max_full_evals`), the last two
turned into metric calls as dspy.GEPA.compile does: `auto:LEVEL` by calling
the installed DSPy's own `GEPA.auto_budget` with compile's arguments (so its
levels and formula are DSPy's), `full-evals:N` as N evaluations of the train
and validation sets (taken as separate sets). Several budgets are a list of
spellings and ranges: `LOW..HIGH` doubles LOW while below HIGH, then HIGH.

A budget too small to search (gepa #375) is told apart before anything is
simulated: after the seed's validation (V calls) every iteration of
k = P x N proposals costs at least 2 k b calls, and gepa starts an iteration
while any budget is left, so B affords at most k * ceil((B - V) / (2 k b))
proposals.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pxn.errors import PxnError
from pxn.fields import whole

DSPY_EXTRA = "pip install 'gepa-pxn[dspy]'"
SPELLINGS = "metric calls (e.g. 400), auto:LEVEL or full-evals:N (dspy.GEPA's budgets)"


@dataclass(frozen=True)
class Budget:
    """A budget as given: exactly one of metric calls, DSPy's auto level, full evaluations."""

    metric_calls: int | None = None
    auto: str | None = None
    full_evals: int | None = None

    @classmethod
    def parse(cls, given: int | str) -> Budget:
        """`400`, "400", "auto:light" or "full-evals:3"."""
        if isinstance(given, int) and not isinstance(given, bool):
            return cls(metric_calls=_at_least_one(given, given))
        if not isinstance(given, str):
            raise PxnError(f"is {SPELLINGS}: got {given!r}", subject="budget")
        text = given.strip()
        if text.isdigit():
            return cls(metric_calls=_at_least_one(int(text), given))
        kind, colon, value = text.partition(":")
        if colon and kind == "auto" and value:
            return cls(auto=value)
        if colon and kind == "full-evals" and value.isdigit():
            return cls(full_evals=_at_least_one(int(value), given))
        raise PxnError(f"is {SPELLINGS}: got {given!r}", subject="budget")

    @property
    def label(self) -> str:
        """As the CLI spells it: "400", "auto:light", "full-evals:3"."""
        if self.auto is not None:
            return f"auto:{self.auto}"
        if self.full_evals is not None:
            return f"full-evals:{self.full_evals}"
        return str(self.metric_calls)

    @property
    def from_dspy(self) -> bool:
        return self.metric_calls is None

    def resolve(self, *, predictors: int, valset_size: int, trainset_size: int) -> int:
        """B in metric calls, for a program of `predictors` predictors, V and the trainset's
        size (DSPy's budgets depend on them; metric calls do not)."""
        if self.metric_calls is not None:
            return self.metric_calls
        whole(predictors, "predictors")
        if self.full_evals is not None:
            return self.full_evals * (trainset_size + valset_size)
        return dspy_auto_budget(str(self.auto), predictors, valset_size)


def metric_calls_of(
    given: int | str, *, predictors: int, valset_size: int, trainset_size: int
) -> int:
    """B from a budget as given (Budget.parse's spellings)."""
    return Budget.parse(given).resolve(
        predictors=predictors, valset_size=valset_size, trainset_size=trainset_size
    )


def dspy_auto_budget(level: str, predictors: int, valset_size: int) -> int:
    """DSPy's own metric calls for `auto=level`, as dspy.GEPA.compile asks for them."""
    candidates = dspy_auto_candidates(level)
    import dspy

    optimizer = dspy.GEPA(metric=_never, max_metric_calls=1, instruction_proposer=_never)
    calls = optimizer.auto_budget(
        num_preds=predictors, num_candidates=candidates, valset_size=valset_size
    )
    return int(calls)


def dspy_auto_candidates(level: str) -> int:
    """DSPy's candidate count for an auto level; refused with DSPy's levels if it has none."""
    try:
        from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS
    except ImportError:
        raise PxnError(
            f"auto:{level} is dspy.GEPA's budget, which DSPy computes, and DSPy is not "
            f"installed: {DSPY_EXTRA}",
            subject="budget",
        ) from None
    if level not in AUTO_RUN_SETTINGS:
        levels = ", ".join(f"auto:{name}" for name in AUTO_RUN_SETTINGS)
        raise PxnError(f"auto:{level} is not one of DSPy's: {levels}", subject="budget")
    return int(AUTO_RUN_SETTINGS[level]["n"])


def parse_budgets(given: int | str | Budget | list | tuple) -> tuple[Budget, ...]:
    """Budgets as given: "1000,2000,4000", "500..20000" (doublings, then HIGH),
    "auto:light,auto:heavy", a mix, one budget, or a list of them."""
    if isinstance(given, Budget):
        return (given,)
    if isinstance(given, list | tuple):
        return tuple(budget for item in given for budget in parse_budgets(item))
    if not isinstance(given, str):
        return (Budget.parse(given),)
    budgets: list[Budget] = []
    for part in given.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", part)
        if match is None:
            budgets.append(Budget.parse(part))
            continue
        low, high = (_at_least_one(int(g), part.strip()) for g in match.groups())
        if high < low:
            raise PxnError(f"{part.strip()!r} runs from a larger budget to a smaller one",
                           subject="budget")  # fmt: skip
        budgets += [Budget(metric_calls=b) for b in doublings(low, high)]
    return tuple(budgets)


def doublings(low: int, high: int) -> list[int]:
    """LOW doubled while below HIGH, then HIGH: 500..4000 -> 500, 1000, 2000, 4000."""
    values = [low]
    while values[-1] * 2 < high:
        values.append(values[-1] * 2)
    return values + ([high] if high != low else [])


def resolve_budgets(
    given: Any, *, predictors: int, valset_size: int, trainset_size: int
) -> dict[int, str]:
    """Budgets as given (parse_budgets) -> {B: how it was given}, smallest B first; where
    two spellings give one B, a DSPy spelling names it ("auto:light" rather than "780")."""
    named: dict[int, str] = {}
    for budget in parse_budgets(given):
        calls = budget.resolve(
            predictors=predictors, valset_size=valset_size, trainset_size=trainset_size
        )
        if calls not in named or budget.from_dspy:
            named[calls] = budget.label
    return dict(sorted(named.items()))


def dspy_auto_levels(predictors: int, valset_size: int) -> dict[str, int]:
    """Each of DSPy's auto levels -> its metric calls for this program and V."""
    from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS

    return {
        f"auto:{level}": dspy_auto_budget(level, predictors, valset_size)
        for level in AUTO_RUN_SETTINGS
    }


# -- budgets too small to search ----------------------------------------------------------

FEW_PROPOSALS = 3  # the fewest proposals a budget should afford, unless asked for more


def proposals_afforded(budget: int, valset_size: int, minibatch: int, k: int) -> int:
    """The most proposals a run of B metric calls makes (none accepted, no merge, no skip)."""
    per_iteration = 2 * k * minibatch
    return k * max(0, math.ceil((budget - valset_size) / per_iteration))


def budget_for_proposals(proposals: int, valset_size: int, minibatch: int, k: int) -> int:
    """The smallest B that affords `proposals` (proposals_afforded's inverse)."""
    iterations = math.ceil(proposals / k)
    return valset_size + 2 * k * minibatch * (iterations - 1) + 1


def too_few_proposals(
    budget: int, valset_size: int, minibatch: int, k: int, wanted: int = FEW_PROPOSALS
) -> str | None:
    """Why B cannot search, in numbers, when it affords fewer than `wanted` proposals of
    k = P x N at b; None when it affords enough."""
    afforded = proposals_afforded(budget, valset_size, minibatch, k)
    if afforded >= wanted:
        return None
    least = budget_for_proposals(wanted, valset_size, minibatch, k)
    shown = "no proposal" if afforded == 0 else f"at most {_proposals(afforded)}"
    return (
        f"B={budget} affords {shown} after the seed's validation (V={valset_size} metric "
        f"calls, then at least 2kb = {2 * k * minibatch} an iteration of k={k} proposals at "
        f"b={minibatch}): {_proposals(wanted)} need B >= {least}"
    )


def _proposals(count: int) -> str:
    return f"{count} proposal" + ("" if count == 1 else "s")


def _at_least_one(value: int, given: Any) -> int:
    if value < 1:
        raise PxnError(f"must be at least 1: got {given!r}", subject="budget")
    return value


def _never(*args: Any) -> Any:
    """The metric and proposer of the optimizer that computes a budget: it never compiles."""
    raise AssertionError("the optimizer that computes a budget is never compiled")
