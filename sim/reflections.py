"""gepa 0.1.4's reflections over an iteration's tasks, when proposals can be lost (pxn.failures).

Read from gepa's `ReflectiveMutationProposer.propose`: the tasks gepa did not
skip each build a reflective dataset; a task whose dataset cannot be built is
dropped there (`dataset`, drawn per distinct (parent, minibatch) pair: tasks
sharing one share its evaluation, and so its fate). The rest reflect in one
pass (`_propose_texts_batch_safe`): every call at once, C at a time, or one
after another when the reflections run one at a time (C = 1), a pass that
then stops at its first failure. When any call of the first pass fails gepa
throws the pass away and asks again for every task, one at a time, each
failure now its task's alone: a task whose call failed fails again with
chance `retry`, any other with chance `reflection`. A task whose last call
failed makes no proposal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pxn.failures import Failures

if TYPE_CHECKING:
    from pxn.sim.gepa_rules import ProposalTask

FAILED = "reflection failed (simulated)"  # a failed call's error in a simulated trace


@dataclass
class Passes:
    """An iteration's reflection calls, pass by pass, and which of them failed."""

    first: list[ProposalTask]
    first_failed: list[bool]
    retried: list[ProposalTask] = field(default_factory=list)  # every task, one at a time
    retry_failed: list[bool] = field(default_factory=list)

    @property
    def proposing(self) -> list[ProposalTask]:
        """The tasks whose last call gave texts, in order."""
        if not self.retried:
            return self.first
        return [t for t, failed in zip(self.retried, self.retry_failed, strict=True) if not failed]

    @property
    def lost(self) -> list[ProposalTask]:
        if not self.retried:
            return []
        return [t for t, failed in zip(self.retried, self.retry_failed, strict=True) if failed]


def lose_before_reflection(
    tasks: list[ProposalTask], chance: float, rng: np.random.Generator
) -> tuple[list[ProposalTask], list[ProposalTask]]:
    """(kept, lost): each distinct (parent, minibatch) pair's dataset fails with `chance`."""
    pairs = list(dict.fromkeys((task.parent, task.chunk) for task in tasks))
    failed = {pair for pair, u in zip(pairs, rng.random(len(pairs)), strict=True) if u < chance}
    kept = [task for task in tasks if (task.parent, task.chunk) not in failed]
    return kept, [task for task in tasks if (task.parent, task.chunk) in failed]


def reflection_passes(
    tasks: list[ProposalTask], failures: Failures, one_at_a_time: bool, rng: np.random.Generator
) -> Passes:
    """gepa's passes over these tasks' reflections."""
    failed = (rng.random(len(tasks)) < failures.reflection).tolist()
    if not any(failed):
        return Passes(tasks, failed)
    # One at a time, the pass stops at its first failure: the tasks after it never ran.
    reached = failed.index(True) + 1 if one_at_a_time else len(tasks)
    chances = [
        failures.retry_failure if i < reached and failed[i] else failures.reflection
        for i in range(len(tasks))
    ]
    again = (rng.random(len(tasks)) < np.asarray(chances)).tolist()
    return Passes(tasks[:reached], failed[:reached], list(tasks), again)
