"""Conformance of the search: real gepa on the task of known quality against the simulator.

On the quality task (synthetic_quality.py) each of a run's FIGURES is one more draw from
the simulator's distribution for its setup, as its wall-clock is (docs/validation.md, "The
search"). Per group and figure, coverage (one-sided binomial against 90%; a figure of few
values holds more, which passes) and a shift (two-sided Mann-Whitney U), flagged when
either rejects at ALPHA / (2 x the pairs). A group's pooled acceptance is a z test of two
ratio estimators with each run a cluster (siblings' verdicts are correlated, so a binomial
test is overconfident): Var(sum a / sum p) ~ sum (a_i - r p_i)^2 / (n (n - 1) mean(p)^2),
at ALPHA / groups. The time a run's best score lies inside the replicates' band is
reported, not tested: a curve's points are not independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

from pxn.checks.conformance import ALPHA, Conformance, Group
from pxn.run_summary import RunSummary
from pxn.shape import Shape
from pxn.sim.predict import Band, Interval
from pxn.stats import p_coverage, percentile, z_test

# Each figure of a run's search, from its summary and the chosen candidate's test score.
FIGURES: dict[str, Callable[[RunSummary, float], float]] = {
    "acceptance": lambda run, test: run.accepted / run.proposals if run.proposals else math.nan,
    "skipped_share": lambda run, test: (
        run.skipped / (run.skipped + run.proposals) if run.skipped + run.proposals else math.nan
    ),
    "iterations": lambda run, test: float(run.iterations),
    "best_score": lambda run, test: math.nan if run.best_score is None else run.best_score,
    "test_score": lambda run, test: test,
}


def figures_of(run: RunSummary, test_score: float | None) -> dict[str, float]:
    test = math.nan if test_score is None else test_score
    return {name: figure(run, test) for name, figure in FIGURES.items()}


def defined(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def p_shift(measured: Sequence[float], simulated: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U: do the runs lie higher or lower than the replicates?"""
    if len(set(measured) | set(simulated)) < 2:  # one value throughout: no shift to see
        return 1.0
    return float(scipy.stats.mannwhitneyu(measured, simulated, alternative="two-sided").pvalue)


@dataclass(frozen=True)
class FigureCheck:
    """One figure of one group's runs beside its replicates."""

    figure: str
    measured: list[float]  # per run (undefined ones left out)
    simulated: Interval  # over the replicates: mean and 5-95%
    percentiles: list[float]  # each run's among the replicates (ties half)
    inside: int
    p_shift: float  # Mann-Whitney U, two-sided
    p_coverage: float  # one-sided binomial: as many inside as a right interval holds
    flagged: bool

    @property
    def mean(self) -> float:
        return float(np.mean(self.measured)) if self.measured else math.nan

    @property
    def side(self) -> str:
        """Which way the runs lie from the replicates."""
        return "higher" if np.mean(self.percentiles) > 0.5 else "lower"


def check_figure(
    figure: str, measured: Sequence[float], simulated: Sequence[float], threshold: float
) -> FigureCheck:
    runs, replicates = defined(measured), defined(simulated)
    interval = Interval.of(replicates)
    inside = sum(interval.low <= value <= interval.high for value in runs)
    shift = p_shift(runs, replicates)
    coverage = p_coverage(inside, len(runs), "less") if runs else 1.0
    return FigureCheck(
        figure=figure,
        measured=runs,
        simulated=interval,
        percentiles=[percentile(value, replicates) for value in runs],
        inside=inside,
        p_shift=shift,
        p_coverage=coverage,
        flagged=min(shift, coverage) < threshold,
    )


@dataclass(frozen=True)
class PooledAcceptance:
    """A group's accepted / proposed over its runs, beside the replicates'."""

    measured: float
    simulated: float
    z: float
    p_value: float  # NaN with fewer than two runs


def pooled_rate(runs: Sequence[RunSummary]) -> tuple[float, float]:
    """sum accepted / sum proposals, and its variance with each run a cluster."""
    accepted = np.array([r.accepted for r in runs], dtype=float)
    proposals = np.array([r.proposals for r in runs], dtype=float)
    rate = accepted.sum() / proposals.sum()
    n = len(runs)
    if n < 2:
        return float(rate), math.nan
    residuals = accepted - rate * proposals
    variance = (residuals**2).sum() / (n * (n - 1) * proposals.mean() ** 2)
    return float(rate), float(variance)


def pooled_acceptance(
    measured: Sequence[RunSummary], simulated: Sequence[RunSummary]
) -> PooledAcceptance:
    rate, variance = pooled_rate(measured)
    sim_rate, sim_variance = pooled_rate(simulated)
    spread = math.sqrt(variance + sim_variance)
    if math.isnan(spread):
        return PooledAcceptance(rate, sim_rate, math.nan, math.nan)
    z, p_value = z_test(rate - sim_rate, spread, rate == sim_rate)
    return PooledAcceptance(rate, sim_rate, z, p_value)


def progress_inside(run: RunSummary, band: Band) -> float:
    """The share of the band's times, from the run's seed validation on, at which the run's
    best score so far lies inside the band (NaN: the run validated nothing in its span)."""
    if not run.progress:
        return math.nan
    at, best = zip(*run.progress, strict=True)
    times = np.asarray(band.times)
    shown = times >= at[0]
    if not shown.any():
        return math.nan
    values = np.asarray(best)[np.searchsorted(at, times[shown], side="right") - 1]
    low, high = np.asarray(band.low)[shown], np.asarray(band.high)[shown]
    return float(np.mean((low <= values) & (values <= high)))


@dataclass(frozen=True)
class SearchGroup:
    """The search of one shape's runs at one W, beside the replicates of their setup."""

    shape: Shape
    workers: int
    runs: list[str]  # the traces
    figures: list[FigureCheck]
    pooled: PooledAcceptance
    pooled_off: bool
    progress_inside: list[float]  # per run: the share of the band's times inside it

    @property
    def flagged(self) -> list[FigureCheck]:
        return [f for f in self.figures if f.flagged]

    def where(self) -> list[str]:
        """What is off here, in words."""
        off = [
            f"{self.shape.label} at W={self.workers}: {f.figure} (runs {f.side} than simulated, "
            f"{f.inside}/{len(f.measured)} inside)"
            for f in self.flagged
        ]
        if self.pooled_off:
            off.append(
                f"{self.shape.label} at W={self.workers}: pooled acceptance "
                f"{self.pooled.measured:.1%} against {self.pooled.simulated:.1%} simulated "
                f"(p = {self.pooled.p_value:.2g})"
            )
        return off


@dataclass(frozen=True)
class SearchConformance:
    groups: list[SearchGroup]
    threshold: float  # the per-test level of the figures' tests (Bonferroni)
    run_figures: dict[str, dict[str, float]]  # per trace: its figures and progress share

    @property
    def conforms(self) -> bool:
        return not any(g.flagged or g.pooled_off for g in self.groups)

    @property
    def verdict(self) -> str:
        checks = [f for g in self.groups for f in g.figures]
        inside = sum(f.inside for f in checks)
        counted = sum(len(f.measured) for f in checks)
        summary = (
            f"{inside}/{counted} run figures inside the simulated 5-95% interval "
            f"({len(checks)} shape-figure pairs, each tested at {self.threshold:.2g})"
        )
        if self.conforms:
            return f"the search conforms: the simulator describes gepa's search ({summary})."
        off = [item for g in self.groups for item in g.where()]
        return f"the search does NOT conform: off at {'; '.join(off)} ({summary})."


def judge_search(conformance: Conformance, test_scores: Mapping[str, float]) -> SearchConformance:
    """The search of `conformance`'s runs (on the quality task) against their replicates.

    `test_scores` maps a trace's path to the chosen candidate's expected score, which only
    the synthetic task knows.
    """
    pairs = len(conformance.groups) * len(FIGURES)
    threshold = ALPHA / (2 * pairs)
    groups, run_figures = [], {}
    for group in conformance.groups:
        searched = search_group(group, test_scores, threshold, ALPHA / len(conformance.groups))
        groups.append(searched)
        for i, run in enumerate(group.runs):
            path = run.check.run
            run_figures[path] = figures_of(run.check.measured, test_scores.get(path)) | {
                "progress_inside": searched.progress_inside[i]
            }
    return SearchConformance(groups, threshold, run_figures)


def search_group(
    group: Group, test_scores: Mapping[str, float], threshold: float, pooled_level: float
) -> SearchGroup:
    replicates = group.runs[0].simulated
    if any(run.simulated is not replicates for run in group.runs):
        raise ValueError("the runs of a group share one setup, as `pxn conformance` runs them")
    measured = [
        figures_of(run.check.measured, test_scores.get(run.check.run)) for run in group.runs
    ]
    simulated = [figures_of(r, r.test_score) for r in replicates]
    figures = [
        check_figure(name, [m[name] for m in measured], [s[name] for s in simulated], threshold)
        for name in FIGURES
    ]
    pooled = pooled_acceptance([run.check.measured for run in group.runs], replicates)
    band = Band.of_progress(replicates)
    return SearchGroup(
        shape=group.shape,
        workers=group.workers,
        runs=[run.check.run for run in group.runs],
        figures=figures,
        pooled=pooled,
        pooled_off=pooled.p_value < pooled_level,
        progress_inside=[progress_inside(run.check.measured, band) for run in group.runs],
    )
