"""gepa's bookkeeping from traces: how often parents recur (front_share), duplicate children.

The front share is tested on parents drawn as the Scenario describes them: P
uniform draws from a front of ceil(share x candidates). With 300 steps of 4
parents the share is known to about +-0.05; the tolerance is 0.1.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pxn.calibrate.traces.bookkeeping import (
    Parents,
    dropped_after_passing,
    fit_duplicates,
    fit_front_share,
)
from pxn.calibrate.traces.units import cut_into_units
from pxn.trace import Decision, Reflection, RunStart
from pxn.trace_reading import Trace


def drawn_parents(share: float, steps: int, p: int, seed: int, accept: float = 1.0) -> Parents:
    """Each step draws p parents from its front and accepts a child with chance `accept`
    (a new candidate, so a new front); the counts as units.py builds them."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[float]] = {f: [] for f in Parents.__dataclass_fields__}
    candidates, front = 1, []
    for _ in range(steps):
        rows["candidates"].append(candidates)
        rows["drawn_before"].append(len(front))
        rows["distinct_before"].append(len(set(front)))
        front += rng.integers(0, max(1, math.ceil(share * candidates)), size=p).tolist()
        rows["drawn"].append(len(front))
        rows["distinct"].append(len(set(front)))
        if rng.random() < accept:
            candidates, front = candidates + 1, []
    return Parents(*(np.array(rows[f], dtype=float) for f in Parents.__dataclass_fields__))


def test_recurring_parents_give_the_front_share() -> None:
    fit = fit_front_share(drawn_parents(0.3, 300, 4, seed=1))
    assert fit.identified and fit.pvalue < 1e-6
    assert fit.chosen == pytest.approx(0.3, abs=0.1)
    assert fit.interval[0] <= 0.3 <= fit.interval[1]


def test_a_whole_pool_front_keeps_the_default() -> None:
    fit = fit_front_share(drawn_parents(1.0, 300, 4, seed=2))
    assert fit.chosen == 1.0 and fit.pvalue > 0.05
    assert fit.interval[1] == 1.0


def test_one_parent_a_step_and_an_acceptance_after_each_say_nothing_about_the_front() -> None:
    fit = fit_front_share(drawn_parents(0.3, 100, 1, seed=3))
    assert not fit.identified and fit.chosen == 1.0
    assert "not identifiable" in fit.reason


@pytest.mark.parametrize(("share", "seed"), [(0.3, 4), (0.6, 5)])
def test_single_runs_rejected_steps_draw_from_one_front_and_give_the_share(share, seed) -> None:
    """One parent a step, a child accepted in 20% of them: the parents of consecutive steps
    with no acceptance between them are draws from one front."""
    fit = fit_front_share(drawn_parents(share, 400, 1, seed=seed, accept=0.2))
    assert fit.identified and fit.pvalue < 0.01
    assert fit.interval[0] <= share <= fit.interval[1]
    assert fit.chosen == pytest.approx(share, abs=0.15)


def test_a_whole_pool_front_in_single_runs_keeps_the_default() -> None:
    fit = fit_front_share(drawn_parents(1.0, 400, 1, seed=6, accept=0.4))
    assert fit.identified and fit.chosen == 1.0 and fit.pvalue > 0.05


def run_start(selection: str = "all") -> RunStart:
    return RunStart(start=0.0, end=0.0, source="runner", shape="1x4", budget=100, workers=4,
                    reflection_concurrency=4, valset_size=2, trainset_size=9, minibatch=1,
                    seed=0, meta={"selection": selection})  # fmt: skip


def decision(iteration: int, j: int, accepted: bool, before: float, after: float) -> Decision:
    return Decision(start=1.0, end=1.0, iteration=iteration, proposal=f"{iteration}-{j}",
                    parent="0", accepted=accepted, score_before=before,
                    score_after=after)  # fmt: skip


def reflection(iteration: int, j: int) -> Reflection:
    return Reflection(start=0.5, end=0.9, iteration=iteration, slot=j,
                      proposal=f"{iteration}-{j}", parent="0")  # fmt: skip


def test_a_child_that_beat_its_parent_and_was_not_accepted_was_a_duplicate() -> None:
    """Iteration 1: three children beat the parent, one was dropped (a sibling's text);
    iteration 2: two beat it, both accepted; one child failed its judge each time."""
    events = [run_start()]
    first = [(True, 1, 2), (False, 1, 2), (True, 1, 3), (False, 2, 1)]
    second = [(True, 0, 1), (True, 0, 2), (False, 1, 1), (False, 1, 0)]
    for it, verdicts in ((1, first), (2, second)):
        events += [reflection(it, j) for j in range(4)]
        events += [decision(it, j, *v) for j, v in enumerate(verdicts)]
    units = cut_into_units([Trace(Path("t.jsonl"), events)])
    assert units.duplicates_shown
    assert units.steps.passed.tolist() == [3.0, 2.0]  # the duplicate passed its judge
    assert units.later.tolist() == [2.0, 1.0] and units.dropped.tolist() == [1.0, 0.0]
    fit = fit_duplicates(int(units.later.sum()), int(units.dropped.sum()), True, "")
    assert fit.share == pytest.approx(1 / 3) and fit.chosen == pytest.approx(1 / 3)
    assert not dropped_after_passing(decision(1, 0, False, 1, 1))  # a tie does not beat the parent


def test_without_scores_or_with_a_limit_duplicates_are_not_fitted() -> None:
    plain = Decision(start=1.0, end=1.0, iteration=1, proposal="1-0", parent="0", accepted=False)
    units = cut_into_units([Trace(Path("t.jsonl"), [run_start(), reflection(1, 0), plain])])
    assert not units.duplicates_shown and "no minibatch scores" in units.duplicates_why_not
    limited = [run_start("best"), reflection(1, 0), decision(1, 0, False, 1, 2)]
    units = cut_into_units([Trace(Path("t.jsonl"), limited)])
    assert not units.duplicates_shown and "selection limit" in units.duplicates_why_not
    # The child beat its parent and the limit dropped it: it passed its judge all the same.
    assert units.steps.passed.tolist() == [1.0] and units.dropped.tolist() == [0.0]
    fit = fit_duplicates(0, 0, False, units.duplicates_why_not)
    assert fit.chosen == 0 and fit.reason.startswith("not fitted")
