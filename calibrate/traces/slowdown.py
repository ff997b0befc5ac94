"""The Scenario's load slowdown beta, fitted from the traces (docs/calibration.md).

The simulator stretches a call started at load m to 1 + beta (m - 1) times its latency:
log latency = c(group) + log(1 + beta (m - 1)) + noise, one c per rollout phase or for
reflections. beta is fitted per model by least squares on the log latencies, profiled
over c (robust to heavy tails, free of the family), and kept 0 unless the F test of
beta = 0 rejects it (the LR's chi-square claims too many slowdowns on small samples).
Where every phase ran at one load the phases are pooled; a model whose own calls cannot
tell a slowdown borrows both models' fit when they share a known local pool. Calls that
may have waited for a server (more than K in flight at their start) are set aside.

Served alone: each call's latency as the simulator draws it, at the measured b. The
simulator draws, caps, shifts a reflection for b, scales a rollout by its candidate's
prompt length (pxn.prompt_lengths) and stretches by load; served_alone undoes the last
three. Calls that may have waited for a server are left out, unless every call of a kind
would be: then on one server each is taken less its wait, on more with the wait in (an
overestimate the caller reports).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.optimize
import scipy.stats

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration
    from pxn.calibrate.traces.units import Calls, Units
    from pxn.tokens import Tokens

ALPHA = 0.01  # a slowdown changes every prediction: it must be clearly supported
BETA_MAX = 20.0  # search range; a call 20 times slower per extra call is beyond any pool
CONFIDENCE = 0.95
SLOWDOWN_MIN_CALLS = 20
SLOWDOWN_MIN_OFF = 5  # calls at a load other than their group's commonest


@dataclass(frozen=True)
class SlowdownFit:
    n: int  # calls used (positive latency, not set aside)
    set_aside: int  # calls that started with more than lm_servers in flight
    loads: dict[str, dict[int, int]]  # group -> load -> calls
    identified: bool  # some group ran at two loads or more
    beta: float  # least-squares estimate (nan when not identified)
    interval: tuple[float, float]  # profile-likelihood 95% interval
    lr_statistic: float
    pvalue: float  # F test of beta = 0; nan when not testable
    chosen: float  # the Scenario's [load] slowdown
    reason: str


def _usable(groups, loads, latencies, servers: int | None):
    """The calls the fit uses (not queued, positive latency): group codes, loads, log latencies."""
    groups, loads = np.asarray(groups), np.asarray(loads, dtype=float)
    latencies = np.asarray(latencies, dtype=float)
    queued = loads > servers if servers is not None else np.zeros(len(loads), bool)
    use = ~queued & np.isfinite(latencies) & (latencies > 0)
    names, codes = np.unique(groups[use], return_inverse=True)
    return names, codes, loads[use], np.log(latencies[use]), int(queued.sum())


def _least_squares(codes: np.ndarray, loads: np.ndarray, log_latency: np.ndarray):
    """beta's least-squares estimate, the residual sum of squares there, and the rss function."""

    def rss(beta: float) -> float:
        """Residual sum of squares of the log model with each group's c at its best."""
        shifted = log_latency - np.log1p(beta * (loads - 1))
        means = np.bincount(codes, shifted) / np.bincount(codes)
        return float(np.sum((shifted - means[codes]) ** 2))

    # beta may come out negative (calls faster under load: noise, or a warm cache);
    # the factor must stay positive at the highest load.
    low = -1 / (loads.max() - 1) + 1e-6
    best = scipy.optimize.minimize_scalar(rss, bounds=(low, BETA_MAX), method="bounded")
    beta, rss_min = float(best.x), float(best.fun)
    rss0 = rss(0.0)
    if rss0 < rss_min:  # the optimiser's tolerance: zero is the best it can do
        beta, rss_min = 0.0, rss0
    return beta, rss_min, rss, low


def refit_beta(groups, loads, latencies, servers: int | None) -> float | None:
    """beta re-estimated (the parameter bootstrap), at least 0; None when not identified.

    Identified only where one group ran at two loads or more: with each group at
    a load of its own, the loads differ only as the groups' own c do, and the
    least squares wander over a flat residual.
    """
    _, codes, loads, log_latency, _ = _usable(groups, loads, latencies, servers)
    spans_loads = [np.ptp(loads[codes == g]) > 0 for g in np.unique(codes)]
    if not any(spans_loads):
        return None
    return max(0.0, _least_squares(codes, loads, log_latency)[0])


def fit_slowdown(groups, loads, latencies, servers: int | None) -> SlowdownFit:
    """Fit one beta to calls in groups (phases, kinds), each group with its own c."""
    names, codes, loads, log_latency, set_aside = _usable(groups, loads, latencies, servers)
    counts = {}
    for g, name in enumerate(names):
        levels, calls = np.unique(loads[codes == g], return_counts=True)
        counts[str(name)] = dict(zip(levels.astype(int).tolist(), calls.tolist(), strict=True))
    identified = any(len(by_load) > 1 for by_load in counts.values())
    n = len(loads)
    if not identified:
        levels = "; ".join(f"{name} at load {', '.join(map(str, m))}" for name, m in counts.items())
        return SlowdownFit(
            n, set_aside, counts, False, math.nan, (math.nan, math.nan), 0.0, 1.0, 0.0,
            f"not identifiable: each group of calls ran at one load only ({levels}); kept 0",
        )  # fmt: skip
    beta, rss_min, rss, low = _least_squares(codes, loads, log_latency)

    # Gaussian likelihood with unknown variance: 2 (ll1 - ll0) = n log(rss0 / rss1).
    def statistic(b: float) -> float:
        return n * math.log(max(rss(b), 1e-300) / max(rss_min, 1e-300))

    lr = max(0.0, statistic(0.0))
    freedom = n - len(names) - 1  # a c per group, and beta
    off = sum(sum(by_load.values()) - max(by_load.values()) for by_load in counts.values())
    if n < SLOWDOWN_MIN_CALLS or off < SLOWDOWN_MIN_OFF or freedom < 1:
        pvalue = math.nan
    else:
        f = (rss(0.0) - rss_min) / max(rss_min / freedom, 1e-300)
        pvalue = float(scipy.stats.f.sf(max(f, 0.0), 1, freedom))
    limit = float(scipy.stats.chi2.ppf(CONFIDENCE, df=1))

    def edge(bound: float) -> float:
        if statistic(bound) <= limit:
            return bound  # the interval runs to the end of the range searched
        return float(scipy.optimize.brentq(lambda b: statistic(b) - limit, beta, bound))

    interval = (edge(low), edge(BETA_MAX))
    chosen = beta if beta > 0 and pvalue < ALPHA else 0.0  # never where untestable (nan)
    if math.isnan(pvalue):
        reason = (
            f"kept 0: slowdown not testable: {n} calls (needs {SLOWDOWN_MIN_CALLS}), {off} "
            f"away from their group's commonest load (needs {SLOWDOWN_MIN_OFF})"
        )
    elif chosen:
        reason = f"slowdown supported (LR={lr:.2f}, F test p={pvalue:.2g})"
    else:
        reason = f"kept 0: slowdown not supported (LR={lr:.2f}, F test p={pvalue:.2g})"
    return SlowdownFit(n, set_aside, counts, True, beta, interval, lr, pvalue, chosen, reason)


ROLE_KIND = {"task": "rollout", "reflection": "reflection"}


BASES = {  # which calls a slowdown was fitted on, in the report's words
    "own": "its own calls, each phase with its own latency",
    "phases pooled": "its own calls, phases pooled: every phase ran at one load, so a "
    "phase's own latency and the load's effect cannot be told apart",
    "pool": "the calls of both models on the shared pool (its own do not show one alone)",
}


@dataclass(frozen=True)
class ModelSlowdown:
    """One model's slowdown: the fit its value comes from, and which calls that fit read."""

    role: str  # "task" (rollouts) or "reflection"
    fit: SlowdownFit
    basis: str  # "own" (phases apart), "phases pooled", "pool" (both models), "" (none)

    @property
    def chosen(self) -> float:
        return self.fit.chosen

    def groups(self, kind: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """The groups this fit gave their own c, for the same calls refitted."""
        return phase if self.basis == "own" else kind

    def calls(self, kind: np.ndarray) -> np.ndarray:
        """Which calls this fit reads."""
        return np.ones(len(kind), bool) if self.basis == "pool" else kind == ROLE_KIND[self.role]

    def lines(self, role: str, chosen: float) -> list[str]:
        """The report's lines: the calls by load, and the slowdown fitted (`chosen` kept)."""
        fit = self.fit
        loads = "; ".join(
            f"{group} " + ", ".join(f"{n} at {m}" for m, n in by_load.items())
            for group, by_load in fit.loads.items()
        )
        lines = [f"{role} model: calls by load (calls of the model in flight): {loads}"]
        if not fit.identified:
            return [*lines, f"  load slowdown: {fit.reason} -> load.{role}.slowdown=0"]
        low, high = fit.interval
        return [
            *lines,
            f"  load slowdown: beta={fit.beta:.3g} [95% {low:.3g}, {high:.3g}] from {fit.n} "
            f"calls ({BASES[self.basis]}; latency x (1 + beta (m - 1)), log least squares); "
            f"{fit.reason} -> load.{role}.slowdown={chosen:.4g}",
        ]


def fit_model_slowdowns(
    kind: np.ndarray, phase: np.ndarray, loads: np.ndarray, latencies: np.ndarray,
    servers: int | None,
) -> dict[str, ModelSlowdown]:  # fmt: skip
    """Each model's slowdown from its own calls, else the fallbacks the module describes."""
    fits = {}
    for role, own_kind in ROLE_KIND.items():
        mine = kind == own_kind
        if not mine.any():
            continue
        candidates = [("own", mine, phase)]
        if own_kind == "rollout":
            candidates.append(("phases pooled", mine, kind))
        if servers is not None:
            candidates.append(("pool", np.ones(len(kind), bool), kind))
        identified = unidentified = None
        for basis, rows, groups in candidates:
            fit = fit_slowdown(groups[rows], loads[rows], latencies[rows], servers)
            if fit.identified and fit.chosen > 0:
                identified = ModelSlowdown(role, fit, basis)
                break
            if fit.identified:
                identified = identified or ModelSlowdown(role, fit, basis)
            unidentified = unidentified or ModelSlowdown(role, fit, "")
        fits[role] = identified or unidentified
    return fits


def draw_slowdowns(cal: Calibration, units: Units) -> dict[str, float]:
    """Each model's slowdown refitted to a resample, where one was kept (on the same calls
    and groups); 0 where none was. The draw's other refits read the calls at these."""
    betas = {}
    for role, fit in cal.slowdowns.items():
        betas[role] = 0.0
        if fit.chosen > 0:
            calls = units.calls
            rows = fit.calls(calls.kind) & ~calls.censored
            groups = fit.groups(calls.kind, calls.phase)[rows]
            refitted = refit_beta(groups, calls.load[rows], calls.latency[rows], cal.servers)
            betas[role] = fit.chosen if refitted is None else refitted
    return betas


def served_alone(
    calls: Calls,
    slowdown: dict[str, float],
    servers: int | None,
    tokens: Tokens | None,
    prompt_factor: np.ndarray | None = None,
) -> tuple[Calls, list[str]]:
    """The calls kept, their latencies as drawn; and the kinds kept with their waits in.
    `prompt_factor`: each call's latency over its seed's, at its candidate's prompt length."""
    keep = np.ones(len(calls.load), bool) if servers is None else calls.load <= servers
    waited = []
    for kind in ROLE_KIND.values():
        mine = calls.kind == kind
        if mine.any() and not (keep & mine).any():
            keep |= mine
            waited.append(kind)
    kept = calls.take(np.flatnonzero(keep))
    factor = np.ones(len(kept.load))
    for role, kind in ROLE_KIND.items():
        mine = kept.kind == kind
        factor[mine] = 1 + slowdown.get(role, 0.0) * (kept.load[mine] - 1)
    latency = kept.latency
    if servers == 1 and waited:  # each call served alone, after the one before it
        alone = np.isin(kept.kind, waited)
        latency = np.where(alone, latency - kept.wait, latency)
        factor[alone] = 1.0
    latency = latency / factor
    if prompt_factor is not None:
        latency = latency / prompt_factor[keep]
    if tokens is not None:
        reflections = kept.kind == "reflection"
        shifts = {b: tokens.reflection_latency_shift(b) for b in np.unique(kept.minibatch)}
        shift = np.array([shifts[b] for b in kept.minibatch])
        latency = np.where(reflections, np.maximum(0.0, latency - shift), latency)
    return dataclasses.replace(kept, latency=latency), waited


def latency_sample(calls: Calls, kind: str, phase: str | None = None):
    """(latencies observed, tries cut at a timeout) of one kind (and phase) of call."""
    rows = calls.of(kind, phase)
    return calls.latency[rows & ~calls.censored], calls.latency[rows & calls.censored]
