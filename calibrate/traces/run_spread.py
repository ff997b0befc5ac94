"""How much runs differ in speed beyond their calls' own spread: load.*.run_spread.

A call's log latency served alone is its group's mean (setup and phase), plus its run's
shift, plus its own noise; run_spread is the shifts' sd (docs/calibration.md, "Run
spread"). A one-way analysis of variance nested in the setups (units.run_design) gives
the F test of no shift, the moment estimate (MS_runs - MS_calls) / n0 and the F interval.
The parameter draws already carry how well the runs pin the mean; run_spread is a new
run's own shift. An unsupported spread is kept 0 but drawn from its confidence
distribution: three runs that happened to agree cannot rule out that a fourth differs.
Where no setup was run twice it cannot be measured, yet the next run's conditions will
differ: it is kept 0 and drawn from a prior, uniform on [0, RUN_SPREAD_PRIOR], up to the
widest spread pxn's studies measured from repeated runs. The calibrated runs' own shifts
are unknown too, and the bootstrap cannot resample a design's one run: a new run differs
from the mean of n such runs by sd s sqrt(1 + 1/n), which the draws carry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.stats

from pxn.calibrate.traces.slowdown import ROLE_KIND
from pxn.calibrate.traces.units import Calls
from pxn.load import RUN_SPREAD_MAX

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample

ALPHA = 0.05  # leaving a real spread out narrows every interval: keep it when plausible
RUN_SPREAD_PRIOR = 0.4  # log-sd: an unmeasured spread's draws are uniform up to this
PRIOR_SOURCE = (
    f"each model's run spread drawn from a prior uniform on [0, {RUN_SPREAD_PRIOR:g}], the "
    "widest pxn's studies measured, times sqrt(1 + 1/runs) for the calibrated runs' own "
    "unknown speed (calibrate from two runs of one setup to measure it)"
)
CONFIDENCE = 0.95
TAIL = (1 - CONFIDENCE) / 2


@dataclass(frozen=True)
class RunSpreadFit:
    role: str  # "task" (rollouts) or "reflection"
    calls: int
    chosen: float  # load.<role>.run_spread
    reason: str
    identified: bool = False
    runs: int = 0  # runs that share their setup with another run
    setups: int = 0  # setups run more than once
    spread: float = math.nan  # the moment estimate's square root
    interval: tuple[float, float] = (math.nan, math.nan)  # 95%, from the F distribution
    f_statistic: float = math.nan
    freedom: tuple[int, int] = (0, 0)  # the F test's degrees of freedom (runs, calls)
    pvalue: float = math.nan
    anova: _Anova | None = None  # the analysis, for the draws
    lone_runs: int = 0  # no setup was run twice: the runs, each its design's only one

    @property
    def drawn_from_prior(self) -> bool:
        """Whether no setup was run twice, so the draws come from the prior."""
        return self.lone_runs > 0

    @property
    def drawn_from_confidence(self) -> bool:
        """Whether the draws come from the confidence distribution (identified, kept 0)."""
        return self.identified and self.chosen == 0

    @property
    def drawn_though_kept_0(self) -> bool:
        """Whether the scenario keeps 0 but its draws carry a spread (unsupported_draws)."""
        return self.drawn_from_confidence or self.drawn_from_prior

    def unsupported_draws(self, rng: np.random.Generator, count: int) -> list[float]:
        """`count` spreads for a spread kept at 0: from its confidence distribution, or,
        unmeasured, from the prior."""
        if self.drawn_from_prior:
            return prior_spreads(rng, count, self.lone_runs)
        return self.confidence_draws(rng, count)

    def confidence_draws(self, rng: np.random.Generator, count: int) -> list[float]:
        """`count` spreads from sigma_runs' confidence distribution within its 95% interval:
        the F pivot at a quantile drawn uniformly in the interval's, at most what a scenario
        admits."""
        spreads = self.anova.spreads(rng.uniform(TAIL, 1 - TAIL, size=count))
        return np.minimum(spreads, RUN_SPREAD_MAX).tolist()


def prior_spreads(rng: np.random.Generator, count: int, runs: int) -> list[float]:
    """`count` spreads of a new run against `runs` calibrated runs, each alone in its design:
    the prior's, times sqrt(1 + 1/runs) for those runs' own shifts, which no draw resamples."""
    spreads = rng.uniform(0.0, RUN_SPREAD_PRIOR, size=count) * math.sqrt(1 + 1 / runs)
    return spreads.tolist()


@dataclass(frozen=True)
class _Anova:
    """The nested analysis of one kind's calls: its mean squares and the test."""

    calls: int
    runs: int
    setups: int
    ms_runs: float
    ms_calls: float
    n0: float  # calls per run, in Searle's sense
    freedom: tuple[int, int]

    @property
    def f_statistic(self) -> float:
        return self.ms_runs / self.ms_calls if self.ms_calls > 0 else math.inf

    @property
    def spread(self) -> float:
        return math.sqrt(max(0.0, (self.ms_runs - self.ms_calls) / self.n0))

    def pvalue(self) -> float:
        return float(scipy.stats.f.sf(self.f_statistic, *self.freedom))

    def spreads(self, probabilities) -> np.ndarray:
        """The F pivot: sigma_runs with the F observed taken as these quantiles of F (0 where
        the quantile exceeds it)."""
        ratios = (self.f_statistic / scipy.stats.f.ppf(probabilities, *self.freedom) - 1) / self.n0
        return np.sqrt(np.maximum(0.0, ratios) * self.ms_calls)

    def interval(self) -> tuple[float, float]:
        """sigma_runs' 95% interval."""
        low, high = self.spreads([1 - TAIL, TAIL]).tolist()
        return low, high


def _anova(calls: Calls, kind: str, design: tuple[str, ...]) -> _Anova | None:
    """The nested analysis of this kind's calls; None when no setup ran twice."""
    rows = calls.of(kind) & ~calls.censored & (calls.latency > 0)
    runs_of: dict[str, list[int]] = {}  # each setup's runs with calls of this kind
    for r in np.unique(calls.run[rows]).tolist():
        runs_of.setdefault(design[r], []).append(r)
    repeated = {s: runs for s, runs in runs_of.items() if len(runs) > 1}
    if not repeated:
        return None
    rows &= np.isin(calls.run, [r for runs in repeated.values() for r in runs])
    run, phase, log_latency = calls.run[rows], calls.phase[rows], np.log(calls.latency[rows])
    setup = np.asarray(design)[run]
    # Each (setup, phase) its own mean; then each run its own shift.
    _, group = np.unique(np.char.add(setup, "\0" + phase.astype(str)), return_inverse=True)
    _, run_code = np.unique(run, return_inverse=True)
    groups, runs = group.max() + 1, run_code.max() + 1
    means = np.bincount(group, log_latency) / np.bincount(group)
    rss_groups = float(np.sum((log_latency - means[group]) ** 2))
    design_matrix = np.zeros((len(log_latency), groups + runs))
    design_matrix[np.arange(len(group)), group] = 1
    design_matrix[np.arange(len(run_code)), groups + run_code] = 1
    coefficients, _, rank, _ = np.linalg.lstsq(design_matrix, log_latency, rcond=None)
    rss_runs = float(np.sum((log_latency - design_matrix @ coefficients) ** 2))
    d_runs = int(rank) - groups
    d_calls = len(log_latency) - int(rank)
    if d_runs < 1 or d_calls < 1:
        return None
    calls_of_run = np.bincount(run)
    n0 = 0.0
    for setup_runs in repeated.values():
        n = calls_of_run[setup_runs]
        n0 += n.sum() - (n**2).sum() / n.sum()
    return _Anova(
        calls=len(log_latency),
        runs=int(runs),
        setups=len(repeated),
        ms_runs=max(0.0, rss_groups - rss_runs) / d_runs,
        ms_calls=rss_runs / d_calls,
        n0=float(n0 / d_runs),
        freedom=(int(d_runs), int(d_calls)),
    )


def fit_run_spread(calls: Calls, design: tuple[str, ...], role: str) -> RunSpreadFit:
    """One model's run_spread from its calls (served alone) and the runs' setups."""
    anova = _anova(calls, ROLE_KIND[role], design)
    if anova is None:
        lone = len(set(design)) == len(design)
        reason = (
            f"not identifiable: no setup was run twice; kept 0, {PRIOR_SOURCE}"
            if lone
            else "not measurable: no setup run twice has timed calls of this model; kept 0"
        )
        of_kind = int(np.sum(calls.of(ROLE_KIND[role])))
        return RunSpreadFit(role, of_kind, 0.0, reason, lone_runs=len(design) if lone else 0)
    pvalue = anova.pvalue()
    supported = pvalue < ALPHA and anova.spread > 0
    d_runs, d_calls = anova.freedom
    test = f"F={anova.f_statistic:.2f} on {d_runs} and {d_calls} df, p={pvalue:.2g}"
    reason = (
        f"supported ({test})"
        if supported
        else f"kept 0: not supported ({test}); drawn from its interval"
    )
    return RunSpreadFit(
        role=role,
        calls=anova.calls,
        runs=anova.runs,
        setups=anova.setups,
        identified=True,
        spread=anova.spread,
        interval=anova.interval(),
        f_statistic=float(anova.f_statistic),
        freedom=anova.freedom,
        pvalue=pvalue,
        chosen=anova.spread if supported else 0.0,
        reason=reason,
        anova=anova,
    )


def with_prior_run_spreads(
    draws: tuple[dict[str, float], ...], rng: np.random.Generator
) -> tuple[dict[str, float], ...]:
    """Each draw with both models' run spread from the prior, where one run is all there is
    and the draws hold none (a run already made, calibrated from its run_dir)."""
    for role in ROLE_KIND:
        path = f"load.{role}.run_spread"
        spreads = prior_spreads(rng, len(draws), runs=1)
        pairs = zip(draws, spreads, strict=True)
        draws = tuple(d if path in d else d | {path: s} for d, s in pairs)
    return draws


def draw_run_spreads(resample: Resample) -> dict[str, float]:
    """Each kept run spread refitted to a resample, each drawn copy of a run a run of its own:
    the moment estimate on the resampled runs (0 if none)."""
    scenario, draw = resample.scenario, {}
    for role, kind in ROLE_KIND.items():
        if scenario.loads.of(role).run_spread > 0:
            anova = _anova(resample.served, kind, resample.units.design)
            draw[f"load.{role}.run_spread"] = 0.0 if anova is None else anova.spread
    return draw


def run_spread_line(fit: RunSpreadFit) -> str:
    """How much whole runs of one setup differ in this model's speed, and what is kept."""
    chosen = f"-> load.{fit.role}.run_spread={fit.chosen:.4g}"
    if not fit.identified:
        return f"  run spread: {fit.reason} {chosen}"
    low, high = fit.interval
    return (
        f"  run spread: runs' mean log latency differs by sd {fit.spread:.3g} [95% {low:.3g}, "
        f"{high:.3g}] beyond the calls' own spread ({fit.runs} runs of {fit.setups} setup(s) "
        f"run twice or more, {fit.calls} calls); {fit.reason} {chosen}"
    )
