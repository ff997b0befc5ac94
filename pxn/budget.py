"""A budget as a gepa or DSPy user gives it, turned into B, the metric calls a run may spend.

Three spellings, one a run: metric calls (`400`, gepa's max_metric_calls),
`auto:LEVEL` (dspy.GEPA's `auto`) or `full-evals:N` (dspy.GEPA's
`max_full_evals`). dspy.GEPA.compile turns the last two into metric calls
before gepa runs, and so does this module, as compile does:

- `auto:LEVEL` by DSPy's own `GEPA.auto_budget`, called on an optimizer made
  here for the purpose (auto_budget is a method; the optimizer is never
  compiled), with the arguments compile passes: the program's predictors
  (its components, at least 1), the level's candidate count from DSPy's
  AUTO_RUN_SETTINGS, and V. compile leaves auto_budget's minibatch at its
  own default, so b does not enter. The levels are DSPy's (an unknown one
  is refused with DSPy's list), and so is the formula: whatever DSPy is
  installed computes it.
- `full-evals:N` as N full evaluations of the train and validation examples:
  DSPy's meaning of a full evaluation, written inline in compile (there is no
  function to call). With no separate valset DSPy counts the trainset once;
  a scenario's V and trainset size are taken as separate sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.errors import PxnError

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
        if not isinstance(predictors, int) or isinstance(predictors, bool) or predictors < 1:
            raise PxnError(f"must be a whole number >= 1: got {predictors!r}", subject="predictors")
        if self.full_evals is not None:
            return self.full_evals * (trainset_size + valset_size)
        return dspy_auto_budget(str(self.auto), predictors, valset_size)


def metric_calls_of(
    given: int | str, *, predictors: int, valset_size: int, trainset_size: int
) -> int:
    """B from a budget as given (Budget.parse's spellings)."""
    budget = Budget.parse(given)
    return budget.resolve(
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


def _at_least_one(value: int, given: Any) -> int:
    if value < 1:
        raise PxnError(f"must be at least 1: got {given!r}", subject="budget")
    return value


def _never(*args: Any) -> Any:
    """The metric and proposer of the optimizer that computes a budget: it never compiles."""
    raise AssertionError("the optimizer that computes a budget is never compiled")
