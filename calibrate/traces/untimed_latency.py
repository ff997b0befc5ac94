"""The rollout latency when adapter calls timed none of their rollouts: fitted to their spans.

Each span is a makespan (makespan.py) on the run's W, or the LM's servers when fewer,
divided by the task model's load slowdown at min(n, pool); timed rollouts enter beside
them served alone. Only a lognormal with no cap and one latency for every phase can be
fitted from spans; a `latency` choice it cannot follow is noted.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pxn.calibrate.traces.fit import (
    BOOTSTRAP,
    FamilyFit,
    LatencyFit,
    describe_latency,
    interval,
    latency_lines,
    no_tail,
    refit_served,
)
from pxn.calibrate.traces.makespan import SpanFit, Spans, fit_spans, refit_spans
from pxn.calibrate.traces.slowdown import latency_sample
from pxn.distribution import Distribution

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

SEED = 20261207
POOR_FIT = 0.01  # a KS p-value of the spans below this earns a note


@dataclass(frozen=True)
class UntimedFit:
    calls: int  # untimed calls fitted
    rollouts: int  # their rollouts
    timed: int  # timed latencies fitted beside them (tries cut at a timeout included)
    set_aside: int  # untimed calls that raised or shared their span with timed rollouts
    pools: dict[int, int]  # pool size -> calls fitted on it
    largest: int  # the most rollouts of one call
    slowdown: float  # the task model's slowdown divided out of the spans
    fit: SpanFit


def as_served(spans: Spans, servers: int | None, slowdown: float) -> Spans:
    """The spans on the pool that ran them, with the task model's slowdown divided out."""
    pool = spans.workers if servers is None else np.minimum(spans.workers, servers)
    factor = 1 + slowdown * (np.minimum(spans.size, pool) - 1)
    return Spans(spans.span / factor, spans.size, pool)


def fit_untimed_latency(
    spans: Spans,
    set_aside: int,
    timed: np.ndarray,
    censored: np.ndarray,
    *,
    servers: int | None,
    slowdown: float,
    choice: str,
    notes: list[str],
) -> tuple[LatencyFit, UntimedFit]:
    """The rollout LatencyFit (its samples: the timed latencies) and what the spans told."""
    served = as_served(spans, servers, slowdown)
    found = fit_spans(served, timed, censored)
    rng = np.random.default_rng(SEED)
    refits = []
    for _ in range(BOOTSTRAP):
        rows = rng.integers(len(served), size=len(served))
        resampled = rng.choice(timed, size=len(timed)) if len(timed) else timed
        refits.append(refit_spans(served.take(rows), resampled, censored, found.params))
    s = np.array([p["s"] for p in refits])
    scale = np.array([p["scale"] for p in refits])
    chosen = Distribution("lognorm", params=dict(found.params))
    family = FamilyFit(
        family="lognorm",
        params=dict(found.params),
        log_likelihood=found.log_likelihood,
        aic=4 - 2 * found.log_likelihood,
        ks_statistic=found.ks_statistic,
        ks_pvalue=found.ks_pvalue,
        mean=chosen.mean(),
    )
    untimed = UntimedFit(
        calls=len(served),
        rollouts=int(served.size.sum()),
        timed=len(timed) + len(censored),
        set_aside=set_aside,
        pools=dict(sorted(Counter(served.workers.tolist()).items())),
        largest=int(served.size.max()),
        slowdown=slowdown,
        fit=found,
    )
    _notes(untimed, choice, notes)
    latency = LatencyFit(
        what="rollout",
        samples=tuple(timed.tolist()),
        dropped=0,
        fits=(family,),
        chosen=chosen,
        reason=f"maximum likelihood of {len(served)} spans"
        + (f" and {untimed.timed} timed latencies" if untimed.timed else "")
        + f", spans' KS p={found.ks_pvalue:.2g}",
        mean_ci=interval(scale * np.exp(s**2 / 2)),
        median_ci=interval(scale),
        param_ci={"s": interval(s), "scale": interval(scale)},
        tail=no_tail(len(timed), "not tested: spans show no pile at a cap"),
    )
    return latency, untimed


def _notes(fit: UntimedFit, choice: str, notes: list[str]) -> None:
    pools = ", ".join(f"{calls} on {pool}" for pool, calls in fit.pools.items())
    beside = f", beside {fit.timed} timed" if fit.timed else ""
    notes.append(
        f"{fit.calls} adapter call(s) timed none of their {fit.rollouts} rollouts: the rollout "
        f"latency is fitted to their spans as makespans on their workers ({pools}){beside}; "
        "a lognormal, one for every phase, no cap (docs/calibration.md)"
    )
    if fit.set_aside:
        notes.append(
            f"{fit.set_aside} untimed adapter call(s) set aside: they raised, or timed some "
            "of their rollouts (their spans are no makespans of the rest)"
        )
    if choice not in ("auto", "lognorm"):
        notes.append(f"the rollout latency is a lognormal, not {choice}: spans fit no other")
    if fit.fit.ks_pvalue < POOR_FIT:
        notes.append(
            f"the spans fit the makespan model poorly (KS p={fit.fit.ks_pvalue:.2g}): check "
            "that W is the pool the adapter ran each call's examples on"
        )


def draw_rollout(resample: Resample) -> dict[str, float]:
    """The rollout latency refitted to a resample: to its spans and timed latencies where
    the point fit was (at the resample's task slowdown), else as any latency. A lognormal's
    refit is none when the resample holds fewer than two spans and latencies."""
    cal, served, spans = resample.calibration, resample.served, resample.units.spans
    if cal.untimed is None:
        return refit_served("rollout", cal.scenario.rollout, served, cal.rollout.tail, "rollout")
    observed, timed_out = latency_sample(served, "rollout")
    if len(spans) + len(observed) < 2:
        return {}
    spans = as_served(spans, cal.servers, resample.betas.get("task", 0.0))
    params = refit_spans(spans, observed, timed_out, cal.scenario.rollout.params)
    if not all(math.isfinite(v) and v > 0 for v in params.values()):
        return {}
    return {f"rollout.{name}": value for name, value in params.items()}


def rollout_lines(cal: Calibration) -> list[str]:
    """The rollout latency's fit: to timed latencies, or to untimed calls' spans."""
    u = cal.untimed
    if u is None:
        return latency_lines(cal.rollout)
    fit = cal.rollout
    (low, high), (mlow, mhigh) = fit.mean_ci, fit.median_ci
    pools = ", ".join(f"{calls} on {pool}" for pool, calls in u.pools.items())
    cis = ", ".join(f"{k} in [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in fit.param_ci.items())
    return [
        f"rollout latency: from the spans of {u.calls} untimed adapter calls ({u.rollouts} "
        f"rollouts, up to {u.largest} a call; calls on each pool size: {pools})"
        + (f" and {u.timed} timed latencies" if u.timed else "")
        + f": mean {fit.chosen.mean():.4g} s [95% {low:.4g}, {high:.4g}], median "
        f"{fit.chosen.params['scale']:.4g} s [{mlow:.4g}, {mhigh:.4g}]",  # a lognormal's scale
        f"  chosen: {describe_latency(fit.chosen)} ({fit.reason})",
        f"  95% bootstrap intervals: {cis}",
    ]
