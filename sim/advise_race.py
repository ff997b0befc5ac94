"""The race over a large grid: after a round of replicates, the allocations that
could still be the answer (not clearly infeasible, not clearly behind the leader, for a
score not clearly slower than one scoring as well).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from scipy.stats import binom

from pxn.sim.advise import TARGET_CHANCE, Allocation, Ask, Assessment

RACE_MARGIN = 3.0  # standard errors an allocation may trail the leader by and stay in
# A race drops an allocation whose runs missed the target so often that a chance of
# TARGET_CHANCE would give so many misses less often than this.
TARGET_RACE_SIGNIFICANCE = 0.001


def race(assessments: list[Assessment], ask: Ask) -> list[Allocation]:
    """The allocations that could still be the answer after the first round."""

    def possible(x: Assessment) -> bool:  # not yet clearly infeasible
        late = ask.deadline is not None and x.wall_clock.low > ask.deadline
        dear = (
            ask.max_dollars is not None
            and x.dollars is not None
            and x.dollars.low > ask.max_dollars
        )
        return not (late or dear or misses_target(x, ask))

    alive = [x for x in assessments if possible(x)]
    if not alive:
        return []
    objective = ask.objective
    leaders = [x for x in alive if x.eligible]
    if ask.target_score is not None and not leaders:
        return [x.allocation for x in alive]  # none reaches the target yet: none leads
    leader = min(leaders or alive, key=lambda x: x.objective(objective)[0])

    def could_win(x: Assessment) -> bool:  # not behind the leader by more than the margin
        behind, se = x.versus(leader, objective)
        return behind <= RACE_MARGIN * se

    contenders = [x for x in alive if could_win(x)]
    if objective == "score":  # of those tied on score the fastest wins (decide)
        out = outpaced(contenders)
        contenders = [x for x, gone in zip(contenders, out, strict=True) if not gone]
    return [x.allocation for x in contenders]


def misses_target(x: Assessment, ask: Ask) -> bool:
    """Whether x's runs missed the target too often for a chance of TARGET_CHANCE."""
    if ask.target_score is None:
        return False
    misses = round((1 - x.chance(ask.target_score)) * x.replicates)
    return misses >= too_many_misses(x.replicates)


@cache
def too_many_misses(replicates: int) -> int:
    """The fewest misses of the target in `replicates` runs that a chance of TARGET_CHANCE
    gives less often than TARGET_RACE_SIGNIFICANCE."""
    return next(
        m
        for m in range(replicates + 2)
        if binom.sf(m - 1, replicates, 1 - TARGET_CHANCE) < TARGET_RACE_SIGNIFICANCE
    )


def outpaced(xs: list[Assessment]) -> list[bool]:
    """For each x, whether another allocation scores at least as well on average and is
    clearly faster: then x can be neither the best score nor the fastest of those tied with
    it. Each x against all the others at once (its paired differences as rows)."""
    if not xs:
        return []
    n = min(x.replicates for x in xs)
    times = np.array([x.wall_clocks[:n] for x in xs])
    scores = np.array([x.test_score.mean for x in xs])
    gone = []
    for i in range(len(xs)):
        others = scores >= scores[i]
        others[i] = False
        if not others.any():
            gone.append(False)
            continue
        slower = times[i] - times[others]  # x's wall-clock less each other's, run by run
        mean = slower.mean(axis=1)
        se = slower.std(axis=1, ddof=1) / math.sqrt(n)
        gone.append(bool(np.any(mean > RACE_MARGIN * se)))
    return gone
