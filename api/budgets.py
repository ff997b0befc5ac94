"""The budgets a command asks about: one or several, each named as it was given, DSPy's
auto levels among them for a DSPy scenario, and those too small to search.

A DSPy scenario (dspy.GEPA runs it, or its budget is one of DSPy's) asked
about several budgets gets DSPy's auto levels that fall within them as
points of their own, named "auto:light" and so on, so a user sees where
DSPy's defaults stand on the curve; those outside the budgets asked are
named in a note rather than simulated (a level far past the budgets asked
would lengthen every replicate).

A budget that affords fewer proposals than asked (pxn.budget.too_few_proposals)
is told before anything is simulated: on stderr when the command shows its
progress, and in the result's notes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pxn.api.console import say, stderr
from pxn.budget import FEW_PROPOSALS, dspy_auto_levels, resolve_budgets, too_few_proposals
from pxn.errors import PxnError

if TYPE_CHECKING:
    from pxn.scenario import Scenario
    from pxn.shape import Shape


@dataclass(frozen=True)
class Budgets:
    """The budgets asked about, smallest first, with how each was given."""

    names: dict[int, str]  # B -> as given ("2000", "auto:light")
    notes: tuple[str, ...] = field(default=())  # DSPy's levels left out, and why

    @property
    def values(self) -> tuple[int, ...]:
        return tuple(self.names)


def budgets_of(
    scenario: Scenario, given: int | str | Sequence[int | str] | None, predictors: int | None
) -> Budgets:
    """The budgets `given` (None: the scenario's own), for the scenario's V, trainset and
    the program's predictors (by default the scenario's), DSPy's levels among them."""
    predictors = scenario.program_predictors if predictors is None else predictors
    if given is None:
        return Budgets({scenario.budget: scenario.budget_given or str(scenario.budget)})
    names = resolve_budgets(
        given,
        predictors=predictors,
        valset_size=scenario.valset_size,
        trainset_size=scenario.trainset_size,
    )
    if len(names) == 1 or not scenario.from_dspy:
        return Budgets(names)
    low, high = min(names), max(names)
    levels = dspy_auto_levels(predictors, scenario.valset_size)
    outside = {label: calls for label, calls in levels.items() if not low <= calls <= high}
    for label, calls in levels.items():
        if label not in outside:
            names[calls] = label
    notes = ()
    if outside:
        listed = ", ".join(f"{label} (B={calls})" for label, calls in outside.items())
        notes = (
            f"DSPy's {listed} for a program of {predictors} predictor(s) and V="
            f"{scenario.valset_size} fall outside the budgets asked ({low}-{high}): widen "
            "them to see where they stand",
        )
    return Budgets(dict(sorted(names.items())), notes)


def proposal_warnings(
    budgets: Sequence[int],
    valset_size: int,
    minibatch: int,
    shapes: Sequence[Shape],
    min_proposals: int = FEW_PROPOSALS,
    told: bool = False,
) -> list[str]:
    """The budgets that afford fewer than `min_proposals` proposals, the narrowest shape's
    (the fewest) at b: the largest such budget in full, the smaller ones counted. Said on
    stderr when `told`."""
    if min_proposals < 1:
        raise PxnError(f"must be a whole number >= 1: got {min_proposals}", subject="min proposals")
    k = min(shape.k for shape in shapes)
    flagged = [
        (budget, reason)
        for budget in sorted(budgets)
        if (reason := too_few_proposals(budget, valset_size, minibatch, k, min_proposals))
    ]
    if not flagged:
        return []
    reason = flagged[-1][1]
    more = len(flagged) - 1
    warning = reason + (f" (and {more} smaller budget(s) asked afford fewer)" if more else "")
    if told:
        say(f"pxn: warning: {warning}", stderr)
    return [warning]
