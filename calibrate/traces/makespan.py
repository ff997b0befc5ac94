"""The rollout latency from adapter calls whose rollouts nothing timed: spans as makespans.

A call's untimed rollouts share one (iteration, phase, start, end). Set aside with a count:
a call that raised, and one with timed rollouts inside its span. W is the recording's
`workers=`, else the `workers` given, else the most timed rollouts in flight (a lower
bound); a run with none is refused in one line.

An untimed adapter call leaves one span: the makespan of its n lognormal latencies
list-scheduled on w = min(n, W) workers (docs/calibration.md, "Untimed adapter calls").
The lognormal's scale factors out, so a span's likelihood is the density of log M1(s) at
log span - log scale: exact for n <= w (the maximum of n draws), and for n > w a
skew-normal matched to SIMULATED list-scheduled makespans of common random numbers on a
grid of s, interpolated in log s. Timed latencies add their log density, tries cut at a
timeout their log survival; (log scale, log s) is maximised by Nelder-Mead. The spans'
KS p-value is optimistic, as the timed fits' is.

The fit (fit_untimed_latency): each span on the run's W, or the LM's servers when fewer,
divided by the task model's load slowdown at min(n, pool); timed rollouts enter beside
them served alone. Only a lognormal with no cap and one latency for every phase can be
fitted from spans; a `latency` choice it cannot follow is noted.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats

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
from pxn.calibrate.traces.slowdown import latency_sample
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.trace import Rollout
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

SHAPES = np.geomspace(0.02, 3.0, 40)  # the grid of s the simulated makespans are drawn on
LOG_SHAPES = np.log(SHAPES)
SIMULATED = 2000  # makespans per (n, w) and s: the moments' Monte-Carlo error is ~2% of an sd
SEED = 20261206
STARTS = (0.15, 0.5, 1.2)  # starting shapes; the best profiled one starts the search
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
MAX_SKEW = 0.99  # a skew-normal's skewness stays below 0.9953
SKEW_CONSTANT = ((4 - math.pi) / 2) ** (2 / 3)  # in the skew-normal's delta from its skewness
REFIT_SEED = 20261207  # the bootstrap of the fit's intervals
POOR_FIT = 0.01  # a KS p-value of the spans below this earns a note


@dataclass(frozen=True)
class Spans:
    """Untimed adapter calls, one row each: its span, its rollouts and its pool."""

    span: np.ndarray  # seconds
    size: np.ndarray  # rollouts n
    workers: np.ndarray  # the pool it ran on: W (or the LM's servers when fewer)

    def take(self, rows: np.ndarray) -> Spans:
        return Spans(self.span[rows], self.size[rows], self.workers[rows])

    def __len__(self) -> int:
        return len(self.span)


@dataclass(frozen=True)
class UntimedCall:
    iteration: int
    phase: str
    span: float  # seconds
    size: int  # rollouts


def untimed_calls(trace: Trace) -> tuple[list[UntimedCall], int]:
    """The trace's untimed calls fit for a makespan, in the order they ran, and how many
    untimed calls were set aside (raised, or shared their span with timed rollouts)."""
    rollouts = trace.of(Rollout)
    keys = Counter((r.iteration, r.phase, r.start, r.end) for r in rollouts if not r.timed)
    raised = {(r.iteration, r.phase, r.start, r.end) for r in rollouts if not r.timed and r.error}
    timed = [r for r in rollouts if r.timed]
    calls, set_aside = [], 0
    for (iteration, phase, start, end), size in keys.items():
        shared = any(
            t.iteration == iteration and t.phase == phase and start <= t.start and t.end <= end
            for t in timed
        )
        if shared or (iteration, phase, start, end) in raised:
            set_aside += 1
            continue
        calls.append(UntimedCall(iteration, phase, end - start, size))
    return calls, set_aside


def resolve_workers(traces: list[Trace], workers: int | None) -> list[Trace]:
    """The traces, each run_start carrying the W its spans need (module docstring): `workers`
    for a run whose recording declared none; PxnError naming a run with untimed calls and no
    W to read them by."""
    if workers is not None and workers < 1:
        raise PxnError(f"must be a whole number >= 1: got {workers}", subject="workers")
    resolved = []
    for trace in traces:
        declared = trace.events[0].workers
        if declared == 0 and workers is not None:
            start = dataclasses.replace(trace.events[0], workers=workers)
            trace = dataclasses.replace(trace, events=[start, *trace.events[1:]])
        elif trace.run_start.workers == 0 and any(not r.timed for r in trace.of(Rollout)):
            raise PxnError(
                f"is unknown for {trace.path}: its adapter timed none of its rollouts, so each "
                "call's span is a makespan on W workers the trace does not name; record with "
                "recording(..., workers=W), or give W here",
                subject="workers",
            )
        resolved.append(trace)
    return resolved


@functools.cache
def log_makespan_law(n: int, w: int) -> np.ndarray:
    """The skew-normal (location, scale, shape) with the mean, sd and skewness of log M1 (n
    standard-lognormal draws of shape s, list-scheduled on w workers), one row each, a column
    per s of SHAPES. Only for n > w."""
    z = np.random.default_rng([SEED, n, w]).standard_normal((SIMULATED, n))
    logs = np.log([_makespans(np.exp(s * z), w) for s in SHAPES])
    mean, sd, skew = logs.mean(axis=1), logs.std(axis=1), scipy.stats.skew(logs, axis=1)
    root = np.abs(np.clip(skew, -MAX_SKEW, MAX_SKEW)) ** (2 / 3)
    delta = np.sign(skew) * np.sqrt(math.pi / 2 * root / (root + SKEW_CONSTANT))
    omega = sd / np.sqrt(1 - 2 * delta**2 / math.pi)
    return np.stack(
        [mean - omega * delta * math.sqrt(2 / math.pi), omega, delta / np.sqrt(1 - delta**2)]
    )


@functools.cache
def mean_makespan(n: int, w: int, s: float) -> float:
    """The mean makespan of n standard-lognormal draws of shape s (scale 1) list-scheduled
    on min(n, w) workers."""
    z = np.random.default_rng([SEED, n, w]).standard_normal((SIMULATED, n))
    return float(_makespans(np.exp(s * z), min(n, w)).mean())


def _makespans(durations: np.ndarray, w: int) -> np.ndarray:
    """Each row's makespan, its jobs taken in order by the worker that frees first."""
    free = durations[:, :w].copy()
    rows = np.arange(len(durations))
    for job in range(w, durations.shape[1]):
        first = free.argmin(axis=1)
        free[rows, first] += durations[:, job]
    return free.max(axis=1)


class SpanLikelihood:
    """The log likelihood of (mu, s) = (log scale, shape) given spans and timed latencies."""

    def __init__(self, spans: Spans, timed: np.ndarray, censored: np.ndarray):
        log_span = np.log(spans.span)
        size, pool = spans.size, np.minimum(spans.size, spans.workers)
        exact = size <= pool
        self.spans = len(log_span)
        self.exact_y, self.other_y = log_span[exact], log_span[~exact]
        self.exact_n = size[exact].astype(float)
        classes = sorted(
            {(int(n), int(w)) for n, w in zip(size[~exact], pool[~exact], strict=True)}
        )
        index = {c: i for i, c in enumerate(classes)}
        rows = [index[int(n), int(w)] for n, w in zip(size[~exact], pool[~exact], strict=True)]
        # (3, class, s) -> (3, span, s): each simulated span's law along the grid of s
        laws = np.array([log_makespan_law(n, w) for n, w in classes]).reshape(
            len(classes), 3, len(SHAPES)
        )
        self.laws = laws.transpose(1, 0, 2)[:, np.array(rows, dtype=int)]
        self.constant = float(np.sum(np.log(self.exact_n))) - float(log_span.sum())
        self.log_timed = np.log(timed)
        self.log_censored = np.log(censored)
        self.constant -= float(self.log_timed.sum()) + len(timed) * HALF_LOG_2PI

    def __call__(self, mu: float, s: float) -> float:
        log_s = math.log(s)
        z = (self.exact_y - mu) / s
        total = (
            self.constant
            + float(((self.exact_n - 1) * scipy.special.log_ndtr(z) - 0.5 * z * z).sum())
            - len(z) * (HALF_LOG_2PI + log_s)
        )
        if len(self.other_y):
            xi, omega, alpha = self._skew_normal(log_s)
            z = (self.other_y - mu - xi) / omega
            total += float(
                (scipy.special.log_ndtr(alpha * z) - 0.5 * z * z - np.log(omega)).sum()
            ) + len(z) * (math.log(2) - HALF_LOG_2PI)
        if len(self.log_timed):
            z = (self.log_timed - mu) / s
            total -= 0.5 * float((z * z).sum()) + len(z) * log_s
        if len(self.log_censored):
            total += float(scipy.special.log_ndtr((mu - self.log_censored) / s).sum())
        return total

    def span_cdf(self, mu: float, s: float) -> np.ndarray:
        """Each span's probability under the model (uniform when the model is right)."""
        exact = scipy.special.ndtr((self.exact_y - mu) / s) ** self.exact_n
        if not len(self.other_y):
            return exact
        xi, omega, alpha = self._skew_normal(math.log(s))
        other = scipy.stats.skewnorm.cdf(self.other_y - mu, alpha, loc=xi, scale=omega)
        return np.concatenate([exact, other])

    def _skew_normal(self, log_s: float) -> np.ndarray:
        """Per simulated span, the skew-normal (location, scale, shape) of log M1 at s."""
        at = np.interp(log_s, LOG_SHAPES, np.arange(len(SHAPES)))
        low = min(int(at), len(SHAPES) - 2)
        t = at - low
        return (1 - t) * self.laws[:, :, low] + t * self.laws[:, :, low + 1]


@dataclass(frozen=True)
class SpanFit:
    params: dict[str, float]  # scipy's lognorm: s and scale
    log_likelihood: float
    ks_statistic: float  # the spans' probabilities against uniform
    ks_pvalue: float


def fit_spans(spans: Spans, timed: np.ndarray, censored: np.ndarray) -> SpanFit:
    """The lognormal's maximum-likelihood (s, scale) from spans and timed latencies (tries cut
    at a timeout: `censored`), searched from the best of STARTS; with the spans' KS test."""
    likelihood = SpanLikelihood(spans, timed, censored)
    x0 = min(
        (np.array([_profiled_mu(likelihood, s), math.log(s)]) for s in STARTS),
        key=lambda theta: _negative(likelihood, theta),
    )
    mu, s = _maximise(likelihood, x0)
    statistic = pvalue = math.nan
    if likelihood.spans:
        ks = scipy.stats.kstest(likelihood.span_cdf(mu, s), "uniform")
        statistic, pvalue = float(ks.statistic), float(ks.pvalue)
    return SpanFit({"s": s, "scale": math.exp(mu)}, likelihood(mu, s), statistic, pvalue)


def refit_spans(
    spans: Spans, timed: np.ndarray, censored: np.ndarray, start: dict[str, float]
) -> dict[str, float]:
    """fit_spans' parameters for a resample, searched from the point estimate `start`."""
    likelihood = SpanLikelihood(spans, timed, censored)
    mu, s = _maximise(likelihood, np.array([math.log(start["scale"]), math.log(start["s"])]))
    return {"s": s, "scale": math.exp(mu)}


def _negative(likelihood: SpanLikelihood, theta: np.ndarray) -> float:
    mu, log_s = theta
    if not LOG_SHAPES[0] <= log_s <= LOG_SHAPES[-1]:
        return math.inf
    value = likelihood(mu, math.exp(log_s))
    return -value if math.isfinite(value) else math.inf


def _maximise(likelihood: SpanLikelihood, x0: np.ndarray) -> tuple[float, float]:
    """(mu, s) by Nelder-Mead from x0 = (mu, log s), s kept on the grid's range."""
    found = scipy.optimize.minimize(
        lambda theta: _negative(likelihood, theta),
        x0,
        method="Nelder-Mead",
        options={"xatol": 1e-5, "fatol": 1e-7},
    )
    mu, log_s = found.x if found.fun <= _negative(likelihood, x0) else x0
    return float(mu), math.exp(log_s)


def _profiled_mu(likelihood: SpanLikelihood, s: float) -> float:
    """The best log scale at shape s."""
    logs = np.concatenate([likelihood.exact_y, likelihood.other_y, likelihood.log_timed])
    found = scipy.optimize.minimize_scalar(
        lambda mu: -likelihood(mu, s),
        bounds=(logs.min() - 10 * s - 1, logs.max() + 1),
        method="bounded",
    )
    return float(found.x)


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
    rng = np.random.default_rng(REFIT_SEED)
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
