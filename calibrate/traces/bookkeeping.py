"""gepa's bookkeeping: how often parents recur (front_share), children that repeat a
sibling (duplicate_children), tasks skipped for a perfect parent (skip_perfect), and the
runs' merge setup with how often a merge passed (merge_acceptance).

front_share: P parents drawn uniformly from a front of F = max(1, ceil(share x
candidates)); d distinct among g draws from one front has likelihood F (F - 1) ...
(F - d + 1) / F^g. One front serves every draw up to the next acceptance, each iteration
adding its share so that iterations stay the bootstrap's unit. The likelihood is a step
function of the share, so the estimate is the middle of the grid's plateau of maxima; 1
is kept unless the chi-bar-square test rejects it. duplicate_children: with selection
'all', a child that beat its parent and was not accepted was dropped as a duplicate.
skip_perfect: the share of tasks that never reached a reflection, at most SKIP_MAX.

merge: the setup is read from run_start meta (use_merge, max_merge_invocations,
components); a trace declaring none ran without merge, and where traces differ the first's
is taken with a note. merge_acceptance is (accepted + 1) / (judged + 2), the posterior
mean under a uniform prior, since a run judges only a handful of merges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.special
import scipy.stats

from pxn.trace import Decision
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

ALPHA = 0.05
SHARE_GRID = np.linspace(0.005, 1.0, 200)
# gepa's merge setup where run_start declares none
UNDECLARED = {"use_merge": False, "max_merge_invocations": 5, "components": 1}


def dropped_after_passing(decision: Decision) -> bool:
    """A child that beat its parent on the minibatch, yet was not accepted (with selection
    'all': a duplicate)."""
    before, after = decision.score_before, decision.score_after
    return not decision.accepted and before is not None and after is not None and after > before


@dataclass(frozen=True)
class Parents:
    """Per iteration: the pool's size at its start, and the parents observed from its front (this
    iteration's and those of the iterations before it since the last acceptance): how many drawn and
    distinct up to this iteration, and before it."""

    candidates: np.ndarray
    drawn: np.ndarray
    distinct: np.ndarray
    drawn_before: np.ndarray
    distinct_before: np.ndarray

    def take(self, rows: np.ndarray) -> Parents:
        return Parents(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))

    def informative(self) -> Parents:
        """The iterations whose parents meet an earlier draw from the same front."""
        return self.take(self.drawn >= 2)


@dataclass(frozen=True)
class FrontFit:
    steps: int  # iterations whose parents meet an earlier draw from their front
    identified: bool
    share: float  # MLE (1 when not identified)
    interval: tuple[float, float]  # profile-likelihood 95%
    lr_statistic: float
    pvalue: float
    chosen: float
    reason: str


def _draws_log_likelihood(front: np.ndarray, drawn: np.ndarray, distinct: np.ndarray):
    """log of F (F - 1) ... (F - d + 1) / F^g: g uniform draws from F giving d distinct."""
    possible = front >= distinct
    falling = scipy.special.gammaln(front + 1) - scipy.special.gammaln(
        np.where(possible, front - distinct + 1, 1)
    )
    return np.where(possible, falling - drawn * np.log(front), -np.inf)


def front_log_likelihood(parents: Parents, shares: np.ndarray) -> np.ndarray:
    """Log-likelihood of the parents' coincidences at each share (shares x iterations, summed)."""
    front = np.maximum(1, np.ceil(np.outer(shares, parents.candidates) - 1e-9))
    after = _draws_log_likelihood(front, parents.drawn, parents.distinct)
    before = _draws_log_likelihood(front, parents.drawn_before, parents.distinct_before)
    # A front too small for the draws before is too small for these too (-inf, not nan).
    ll = np.full_like(after, -np.inf)
    np.subtract(after, before, out=ll, where=np.isfinite(before))
    return ll.sum(axis=1)


def share_mle(parents: Parents) -> tuple[float, np.ndarray]:
    """The middle of the grid's plateau of maximal likelihood, and the likelihood on the grid."""
    ll = front_log_likelihood(parents, SHARE_GRID)
    top = ll.max()
    best = np.flatnonzero(ll >= top - 1e-9)
    # the plateau holding the largest maximiser (the one nearest the default share 1)
    end = best[-1]
    start = end
    while start > 0 and ll[start - 1] >= top - 1e-9:
        start -= 1
    return float((SHARE_GRID[start] + SHARE_GRID[end]) / 2), ll


def fit_front_share(parents: Parents) -> FrontFit:
    informative = parents.informative()
    n = len(informative.drawn)
    if n == 0:
        reason = (
            "not identifiable: no front was drawn from twice (one parent an iteration, and "
            "an acceptance after every iteration); kept 1"
        )
        return FrontFit(0, False, 1.0, (math.nan, math.nan), 0.0, 1.0, 1.0, reason)
    share, ll = share_mle(informative)
    statistic = max(0.0, float(2 * (ll.max() - ll[-1])))
    pvalue = 0.5 * float(scipy.stats.chi2.sf(statistic, df=1)) if statistic > 0 else 1.0
    inside = SHARE_GRID[2 * (ll.max() - ll) <= scipy.stats.chi2.ppf(0.95, df=1)]
    interval = (float(inside.min()), float(inside.max()))
    words = f"LR={statistic:.2f}, p={pvalue:.2g}"
    if pvalue < ALPHA:
        chosen, reason = share, f"parents recur ({words})"
    else:
        chosen, reason = 1.0, f"kept 1: recurrence not supported ({words})"
    return FrontFit(n, True, share, interval, statistic, pvalue, chosen, reason)


@dataclass(frozen=True)
class DuplicateFit:
    shown: bool  # the traces can show duplicates (scores recorded, selection 'all')
    later: int  # selected children after the first of their iteration
    dropped: int
    share: float
    wilson: tuple[float, float]
    chosen: float
    reason: str


def fit_duplicates(later: int, dropped: int, shown: bool, why_not: str) -> DuplicateFit:
    if not shown or later == 0:
        why_not = why_not if not shown else "no iteration selected two children or more"
        return DuplicateFit(shown, 0, 0, 0.0, (math.nan, math.nan), 0.0, f"not fitted: {why_not}")
    ci = scipy.stats.binomtest(dropped, later).proportion_ci(method="wilson")
    share = dropped / later
    reason = (
        f"{dropped} of {later} later selected children repeated a sibling"
        if dropped
        else f"none of {later} later selected children repeated a sibling; kept 0"
    )
    # A duplicate is observed, not inferred: any drop is evidence enough. The
    # Scenario's share stays below 1 (an iteration must keep its first child).
    return DuplicateFit(
        True, later, dropped, share, (float(ci.low), float(ci.high)), min(share, 0.99), reason
    )


SKIP_MAX = 0.95  # a scenario whose every task is skipped never proposes anything


@dataclass(frozen=True)
class SkipFit:
    """gepa skips a task whose parent scored perfectly on its minibatch: how often."""

    tasks: int  # k per completed iteration, summed
    reflected: int  # reflections made in those iterations
    probability: float

    def line(self) -> str:
        return (
            f"perfect-parent skips: {self.tasks - self.reflected} of {self.tasks} tasks -> "
            f"skip_perfect={self.probability:.3f}"
        )


def skip_share(tasks: float, reflected: float) -> float:
    """The share of completed iterations' tasks that never reached a reflection."""
    share = 0.0 if tasks == 0 else max(0.0, 1 - reflected / tasks)
    return min(share, SKIP_MAX)


def fit_skip(tasks: np.ndarray, reflected: np.ndarray) -> SkipFit:
    """From each unit's tasks of a completed iteration and those that reached a reflection."""
    return SkipFit(int(tasks.sum()), int(reflected.sum()), skip_share(tasks.sum(), reflected.sum()))


def draw_skip(resample: Resample) -> dict[str, float]:
    units = resample.units
    return {"skip_perfect": skip_share(units.tasks.sum(), units.unskipped.sum())}


def draw_front_share(resample: Resample) -> dict[str, float]:
    if resample.scenario.front_share < 1:
        informative = resample.units.parents.informative()
        if len(informative.drawn):
            return {"front_share": share_mle(informative)[0]}
    return {}


def draw_duplicates(resample: Resample) -> dict[str, float]:
    units = resample.units
    if resample.scenario.duplicate_children > 0 and units.later.sum() > 0:
        return {"duplicate_children": min(float(units.dropped.sum() / units.later.sum()), 0.99)}
    return {}


def bookkeeping_lines(cal: Calibration) -> list[str]:
    f, d = cal.front, cal.duplicates
    front = f"front_share: {f.reason}"
    if f.identified:
        front = (
            f"front_share (parents drawn from one front; {f.steps} iterations whose parents "
            f"meet parents drawn earlier from it): MLE {f.share:.3g} "
            f"[95% {f.interval[0]:.3g}, {f.interval[1]:.3g}]; {f.reason}"
        )
    if f.chosen < 1:
        front += f" -> front_share={f.chosen:.3g}"
    dup = f"duplicate_children: {d.reason}"
    if d.shown and d.later:
        dup += f" [Wilson 95% {d.wilson[0]:.3g}, {d.wilson[1]:.3g}]"
    if d.chosen:
        dup += f" -> duplicate_children={d.chosen:.3g}"
    return [front, dup]


@dataclass(frozen=True)
class MergeFit:
    merge: bool
    max_merges: int
    components: int
    judged: int  # merges gepa judged in the traces
    accepted: int

    @property
    def merges(self) -> bool:
        """Whether gepa could merge anything: merge on, and two components or more."""
        return self.merge and self.components > 1

    @property
    def rate(self) -> float:
        return merge_rate(self.judged, self.accepted)

    def scenario_fields(self) -> dict[str, Any]:
        """The scenario's merge fields (none when the runs ran without merge)."""
        if not self.merge:
            return {}
        fields = {"merge": True, "max_merges": self.max_merges, "components": self.components}
        return fields | ({"merge_acceptance": self.rate} if self.merges else {})


def merge_rate(judged: float, accepted: float) -> float:
    """merge_acceptance from the merges judged and accepted."""
    return (accepted + 1) / (judged + 2)


def fit_merges(
    traces: list[Trace], judged: np.ndarray, accepted: np.ndarray, notes: list[str]
) -> MergeFit:
    """`judged`, `accepted`: the merges per unit (units.py)."""
    declared = [
        {key: t.run_start.meta.get(key, value) for key, value in UNDECLARED.items()} for t in traces
    ]
    first = declared[0]
    differ = sorted({key for setup in declared for key in setup if setup[key] != first[key]})
    if differ:
        notes.append(
            f"traces differ in gepa's merge setup ({', '.join(differ)}); the scenario takes "
            f"{traces[0].path}'s"
        )
    fit = MergeFit(
        merge=bool(first["use_merge"]),
        max_merges=int(first["max_merge_invocations"]),
        components=int(first["components"]),
        judged=int(judged.sum()),
        accepted=int(accepted.sum()),
    )
    if fit.merge and not fit.merges:
        notes.append(
            "gepa's merge was on, for a program of one component, which it never merges: "
            "the scenario's merge changes nothing"
        )
    elif fit.merges and fit.judged == 0:
        notes.append(
            "gepa's merge was on, but the traces hold no merge it judged: merge_acceptance "
            "= 0.5 is unmeasured"
        )
    return fit


def draw_merge_acceptance(resample: Resample) -> dict[str, float]:
    """How often a merge passed, where gepa could merge, refitted to a resample."""
    if resample.scenario.merge_acceptance is None:
        return {}
    units = resample.units
    return {"merge_acceptance": merge_rate(units.merges.sum(), units.merges_accepted.sum())}


def merge_lines(cal: Calibration) -> list[str]:
    """gepa's merge: the runs' setup, and how often a merge passed its subsample."""
    m = cal.merges
    if not m.merge:
        return ["merge: off in the runs (gepa's use_merge)"]
    setup = (
        f"merge: on in the runs (use_merge, at most {m.max_merges} accepted; a program of "
        f"{m.components} component(s))"
    )
    if not m.merges:
        return [f"{setup}: gepa merges only programs of two components or more"]
    judged = (
        f"{m.accepted}/{m.judged} merges passed their subsample" if m.judged else "no merge judged"
    )
    return [
        f"{setup}; {judged} -> merge_acceptance=(accepted + 1)/(judged + 2)={m.rate:.3g}",
        "  merge latency: the merge's subsample rollouts are rollouts (phase merge_subsample)",
    ]
