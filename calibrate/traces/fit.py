"""Latency distributions fitted to observed call durations.

Each candidate family is fitted by maximum likelihood with scipy (loc fixed at
0: a latency cannot be negative and a free loc makes small-sample fits
unstable), ranked by AIC, and checked with a Kolmogorov-Smirnov test. The KS
p-value uses parameters estimated from the same data, so it is optimistic: a
family it rejects fits badly indeed. An empirical bootstrap (resampling the
observed latencies) is the alternative when no family fits or there are too
few points to fit one. Bootstrap intervals say how uncertain a small sample
leaves the mean, the median and the chosen family's parameters.

Bounded tails. Given the maximum M, the count within CAP_WINDOW of M is binomial at the
share the best family fitted to every latency (the pile included, so conservative) gives
that window; a pile of CAP_MIN_PILE at p < CAP_ALPHA in CAP_MIN_SAMPLE latencies or more
is a cap. A naturally bounded latency can read as one. Where the runner retried after
timeouts the cap is known: those tries are right-censored, the cap is their median
duration and cap_retries the most retries a finished call made. A capped sample is fitted
with the piled-up latencies right-censored at the window's edge: the likelihood takes the
survival function there, maximised numerically from the uncensored fit; the KS test then
checks the latencies below the cap against the fit conditioned on being below it, and the
chosen distribution carries the cap, which sits on latencies served alone, where the
simulator applies it (docs/calibration.md, "Caps").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.calibrate.traces.slowdown import latency_sample
from pxn.distribution import Distribution
from pxn.errors import PxnError

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.units import Calls

FAMILIES = ("lognorm", "gamma", "weibull_min", "expon")
CHOICES = ("auto", "empirical", *FAMILIES)
MIN_FIT_POINTS = 8  # below this a two-parameter family is a guess: resample instead
KS_REJECT = 0.01  # auto falls back to the empirical bootstrap below this KS p-value
BOOTSTRAP = 200  # resamples for the intervals; enough for a 95% percentile interval
SEED = 20260730  # fixed, so the same traces give the same report
CAP_WINDOW = 0.02  # a pile is within 2% of the maximum
CAP_ALPHA = 1e-3  # every latency sample is screened: a cap must be clear
CAP_MIN_PILE = 5
CAP_MIN_SAMPLE = 20


@dataclass(frozen=True)
class TailFit:
    n: int  # latencies screened
    low: float  # the window's lower edge: latencies at or above it are censored there
    pvalue: float  # binomial test of the pile; nan when not tested
    timed_out: int  # tries the runner cut at a timeout and retried (Attempt events)
    cap: float | None
    cap_retries: int
    reason: str

    @property
    def capped(self) -> bool:
        return self.cap is not None


def no_tail(n: int, reason: str) -> TailFit:
    return TailFit(n, math.inf, math.nan, 0, None, 0, reason)


def detect_cap(
    observed: np.ndarray,
    uncapped: scipy.stats.rv_continuous | None,
    timed_out: np.ndarray,
    retries: tuple[int, ...],
) -> TailFit:
    """Screen one latency sample for a cap.

    `uncapped` is the best family fitted to the observed latencies (None when too
    few for one); `timed_out` the durations of tries cut at a timeout; `retries`
    per retried call, the retries it made after timeouts and then finished.
    """
    n = len(observed)
    if len(timed_out):
        cap = float(np.median(timed_out))
        reason = f"{len(timed_out)} tries timed out at {cap:.4g} and were retried"
        low, most = cap * (1 - CAP_WINDOW), max(retries, default=0)
        return TailFit(n, low, math.nan, len(timed_out), cap, most, reason)
    if uncapped is None or n < CAP_MIN_SAMPLE:
        return no_tail(n, f"not testable: {n} latencies (needs {CAP_MIN_SAMPLE} and a family fit)")
    maximum = float(observed.max())
    low = maximum * (1 - CAP_WINDOW)
    piled = int(np.sum(observed >= low))
    below_max = float(uncapped.cdf(maximum))
    share = (below_max - float(uncapped.cdf(low))) / below_max if below_max > 0 else 1.0
    expected = (n - 1) * share
    pvalue = float(scipy.stats.binom.sf(piled - 2, n - 1, share))
    found = piled >= CAP_MIN_PILE and pvalue < CAP_ALPHA
    words = (
        f"{piled} values within {CAP_WINDOW:.0%} of the maximum {maximum:.4g}, "
        f"{expected + 1:.2g} expected without a cap (binomial p={pvalue:.2g})"
    )
    if not found:
        return TailFit(n, math.inf, pvalue, 0, None, 0, f"no cap: {words}")
    cap = float(np.median(observed[observed >= low]))
    return TailFit(n, low, pvalue, 0, cap, 0, f"capped at {cap:.4g}: {words}")


def censor(
    observed: np.ndarray, timed_out: np.ndarray, low: float
) -> tuple[np.ndarray, np.ndarray]:
    """(uncensored latencies, right-censoring points): the pile at `low`, timeouts as they ran."""
    piled = observed >= low
    points = np.concatenate([np.full(int(piled.sum()), low), timed_out])
    return observed[~piled], points


@dataclass(frozen=True)
class FamilyFit:
    """One family's maximum-likelihood fit and how well it describes the data."""

    family: str
    params: dict[str, float]  # scipy's shape names and scale; loc is 0
    log_likelihood: float
    aic: float
    ks_statistic: float
    ks_pvalue: float
    mean: float

    def latency(self) -> Distribution:
        return Distribution(self.family, params=dict(self.params))


@dataclass(frozen=True)
class LatencyFit:
    """Every family's fit to one sample of latencies, and the one chosen."""

    what: str
    samples: tuple[float, ...]  # the positive latencies fitted, seconds
    dropped: int  # latencies <= 0 set aside (no family here has mass there)
    fits: tuple[FamilyFit, ...]  # best AIC first; empty when too few points
    chosen: Distribution
    reason: str  # why the chosen one
    mean_ci: tuple[float, float]  # bootstrap 95% interval of the mean
    median_ci: tuple[float, float]
    param_ci: dict[str, tuple[float, float]]  # of the chosen family's parameters (uncensored)
    tail: TailFit  # whether the sample piles up at a cap

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def relative_uncertainty(self) -> float:
        """Half the width of the mean's interval over the mean."""
        low, high = self.mean_ci
        return (high - low) / 2 / self.mean if self.mean > 0 else math.inf

    def fit_of(self, family: str) -> FamilyFit | None:
        return next((f for f in self.fits if f.family == family), None)


def mle_params(family: str, data: np.ndarray) -> dict[str, float]:
    """The family's maximum-likelihood parameters with loc fixed at 0, by scipy's names."""
    if family == "weibull_min":
        return _weibull_params(data)
    dist = getattr(scipy.stats, family)
    *shapes, _loc, scale = dist.fit(data, floc=0)
    names = dist.shapes.split(", ") if dist.shapes else []
    return {name: float(v) for name, v in zip(names, shapes, strict=True)} | {"scale": float(scale)}


def _weibull_params(data: np.ndarray) -> dict[str, float]:
    """Weibull's MLE (loc 0) from its profile equation in the shape c alone.

    scipy's generic search takes some 10 ms a fit; the bootstraps refit hundreds
    of times. At the MLE, 1/c + mean(log x) = sum(x^c log x) / sum(x^c), and the
    left side minus the right falls as c grows, so a bracketing root finder
    solves it; then scale = mean(x^c)^(1/c).
    """
    logs = np.log(data)
    mean_log = logs.mean()
    shifted = logs - logs.max()  # x^c scaled by max(x)^c: the ratio is unchanged

    def gap(c: float) -> float:
        weights = np.exp(c * shifted)
        return 1 / c + mean_log - float(np.sum(weights * logs) / np.sum(weights))

    low, high = 1e-3, 1.0
    while gap(high) > 0 and high < 1e4:
        high *= 2
    # A (nearly) constant sample, as a resample of a few points can be, has no
    # root: its MLE shape runs off to infinity, so the cap stands in for it.
    c = high if gap(high) > 0 else float(scipy.optimize.brentq(gap, low, high, xtol=1e-12))
    scale = float(np.exp(logs.max()) * np.mean(np.exp(c * shifted)) ** (1 / c))
    return {"c": c, "scale": scale}


def censored_params(
    family: str, data: np.ndarray, censored: np.ndarray, start: dict[str, float] | None = None
) -> dict[str, float]:
    """The family's maximum-likelihood parameters (loc 0) with `censored` right-censored.

    Without censored points this is mle_params. Otherwise L-BFGS-B over the log
    parameters, from `start` or the fit that ignores the censoring.
    """
    if len(censored) == 0:
        return mle_params(family, data)
    dist = getattr(scipy.stats, family)
    start = start or mle_params(family, np.concatenate([data, censored]))
    names = list(start)

    def negative(theta: np.ndarray) -> float:
        frozen = dist(**dict(zip(names, np.exp(theta), strict=True)))
        ll = np.sum(frozen.logpdf(data)) + np.sum(frozen.logsf(censored))
        return -float(ll) if np.isfinite(ll) else 1e300

    x0 = np.log([start[name] for name in names])
    result = scipy.optimize.minimize(negative, x0, method="L-BFGS-B")
    best = result.x if result.fun <= negative(x0) else x0
    return {name: float(v) for name, v in zip(names, np.exp(best), strict=True)}


def fit_family(family: str, data: np.ndarray, censored: np.ndarray) -> FamilyFit:
    params = censored_params(family, data, censored)
    frozen = getattr(scipy.stats, family)(**params)
    log_likelihood = float(np.sum(frozen.logpdf(data)) + np.sum(frozen.logsf(censored)))
    if len(censored):  # the latencies below the cap, against the fit below it
        below = float(frozen.cdf(censored.min()))
        ks = scipy.stats.kstest(data, lambda x: np.minimum(frozen.cdf(x) / below, 1.0))
    else:
        ks = scipy.stats.kstest(data, frozen.cdf)
    return FamilyFit(
        family=family,
        params=params,
        log_likelihood=log_likelihood,
        aic=2 * len(params) - 2 * log_likelihood,
        ks_statistic=float(ks.statistic),
        ks_pvalue=float(ks.pvalue),
        mean=float(frozen.mean()),
    )


def fit_latency(
    what: str,
    durations: Sequence[float],
    choice: str = "auto",
    *,
    timed_out: Sequence[float] = (),
    retries: tuple[int, ...] = (),
    tail: TailFit | None = None,
) -> LatencyFit:
    """Fit the families to `durations` (seconds) and choose one as `choice` asks.

    `timed_out`: durations of tries cut at a timeout (right-censored); `retries`:
    per retried call, its retries after timeouts (detect_cap). A `tail`
    given (a phase's share of a sample already screened) is applied, not tested.
    """
    if choice not in CHOICES:
        raise PxnError(f"latency choice is one of {', '.join(CHOICES)}: got {choice!r}")
    values = np.asarray(durations, dtype=float)
    data = values[np.isfinite(values) & (values > 0)]
    dropped = len(values) - len(data)
    cut = np.asarray(timed_out, dtype=float)
    if len(data) == 0:
        raise PxnError(f"{what}: no positive latencies to fit ({len(values)} observed)")
    fits = _fit_families(data, np.empty(0))
    if tail is None:
        best = getattr(scipy.stats, fits[0].family)(**fits[0].params) if fits else None
        tail = detect_cap(data, best, cut, retries)
    if tail.capped:
        below, censored = censor(data, cut, tail.low)
        fits = _fit_families(below, censored) if len(below) >= MIN_FIT_POINTS else []
    chosen, reason = _choose(np.concatenate([data, cut]), fits, choice)
    if tail.capped:
        chosen = dataclasses.replace(chosen, cap=tail.cap, cap_retries=tail.cap_retries)
    rng = np.random.default_rng(SEED)
    resamples = rng.choice(data, size=(BOOTSTRAP, len(data)))
    return LatencyFit(
        what=what,
        samples=tuple(data.tolist()),
        dropped=dropped,
        fits=tuple(fits),
        chosen=chosen,
        reason=reason,
        mean_ci=interval(resamples.mean(axis=1)),
        median_ci=interval(np.median(resamples, axis=1)),
        param_ci={} if tail.capped else _param_intervals(chosen, resamples),
        tail=tail,
    )


def _fit_families(data: np.ndarray, censored: np.ndarray) -> list[FamilyFit]:
    """Every family's fit, best AIC first; none when too few distinct points."""
    if len(data) < MIN_FIT_POINTS or np.ptp(data) == 0:
        return []
    with np.errstate(all="ignore"):
        fits = [fit for family in FAMILIES if (fit := _fit_or_none(family, data, censored))]
    return sorted((f for f in fits if math.isfinite(f.aic)), key=lambda f: f.aic)


def _fit_or_none(family: str, data: np.ndarray, censored: np.ndarray) -> FamilyFit | None:
    """The family's fit, or None where scipy's solver finds none: latencies that differ only
    in their last digits (a tiny run's, or a slowdown divided out) leave a family such as
    gamma no root to find."""
    try:
        return fit_family(family, data, censored)
    except (ValueError, RuntimeError):
        return None


def _choose(data: np.ndarray, fits: list[FamilyFit], choice: str) -> tuple[Distribution, str]:
    empirical = Distribution("empirical", samples=tuple(data.tolist()))
    if not fits:
        few = len(data) < MIN_FIT_POINTS
        if choice not in ("auto", "empirical"):
            why = f"need {MIN_FIT_POINTS} or more" if few else "they barely differ"
            raise PxnError(
                f"{choice} cannot be fitted to {len(data)} latencies ({why}); choose empirical",
                subject="latency",
            )
        why = "too few points for a family fit" if few else "no family fits latencies this alike"
        return empirical, f"{why} ({len(data)}): empirical bootstrap"
    if choice == "empirical":
        return empirical, "asked for: empirical bootstrap"
    if choice != "auto":
        fit = next((f for f in fits if f.family == choice), None)
        if fit is None:
            raise PxnError(f"the {choice} fit failed on these latencies; choose another family")
        return fit.latency(), f"asked for: {choice}"
    best = fits[0]
    if best.ks_pvalue < KS_REJECT:
        return empirical, (
            f"best AIC {best.family} rejected by KS (p={best.ks_pvalue:.2g}): empirical bootstrap"
        )
    return best.latency(), f"lowest AIC, KS p={best.ks_pvalue:.2g}"


def interval(values: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _param_intervals(chosen: Distribution, resamples: np.ndarray) -> dict[str, tuple[float, float]]:
    """Bootstrap the chosen family's parameters: refit it to each resample."""
    if chosen.dist == "empirical":
        return {}
    refits: dict[str, list[float]] = {name: [] for name in chosen.params}
    for sample in resamples:
        if np.ptp(sample) == 0:
            continue
        try:
            with np.errstate(all="ignore"):
                params = mle_params(chosen.dist, sample)
        except (ValueError, RuntimeError):  # a resample with no spread left to fit
            continue
        for name, value in params.items():
            refits[name].append(value)
    return {name: interval(np.asarray(v)) for name, v in refits.items() if v}


def refit_distribution(
    path: str,
    point: Distribution,
    observed: np.ndarray,
    timed_out: np.ndarray,
    censor_at: float | None,
) -> dict[str, float]:
    """The point distribution's parameters refitted to a resample (none if it is too
    small), by their paths in a parameter draw ("rollout.s").

    An empirical distribution's draw is its scale: the sample's mean (zeros and
    timed-out tries included) over the calibration sample's.
    """
    if point.empirical:
        everything = np.concatenate([observed, timed_out])
        if len(everything) == 0 or np.mean(point.samples) <= 0:
            return {}
        ratio = everything.mean() / np.mean(point.samples)
        return {f"{path}.scale": float(ratio * point.params.get("scale", 1.0))}
    values = observed[observed > 0]
    if len(values) < 2 or np.ptp(values) == 0:
        return {}
    below, censored = values, timed_out
    if censor_at is not None:
        below, censored = censor(values, timed_out, censor_at)
    if len(below) < 2:
        return {}
    with np.errstate(all="ignore"):
        params = censored_params(point.dist, below, censored, start=dict(point.params))
    if not all(np.isfinite(v) and v > 0 for v in params.values()):
        return {}
    return {f"{path}.{name}": value for name, value in params.items()}


def refit_served(
    path: str, point: Distribution, served: Calls, tail: TailFit, kind: str,
    phase: str | None = None,
) -> dict[str, float]:  # fmt: skip
    """A latency refitted to the resample's served calls of one kind (and phase), with the
    cap where the point fit found one."""
    observed, timed_out = latency_sample(served, kind, phase)
    return refit_distribution(path, point, observed, timed_out, tail.low if tail.capped else None)


def draw_reflection(resample: Resample) -> dict[str, float]:
    cal = resample.calibration
    return refit_served(
        "reflection", cal.scenario.reflection, resample.served, cal.reflection.tail, "reflection"
    )


def describe_latency(latency: Distribution) -> str:
    if latency.dist == "empirical":
        return f"empirical bootstrap of {len(latency.samples)} samples"
    params = ", ".join(f"{k}={v:.4g}" for k, v in latency.params.items())
    return f"{latency.dist}({params})"


def latency_lines(fit: LatencyFit, quantity: str = "latency", unit: str = "s") -> list[str]:
    """A fit's lines; token counts are fitted the same way (quantity "tokens", unit "tok")."""
    low, high = fit.mean_ci
    mlow, mhigh = fit.median_ci
    lines = [
        f"{fit.what} {quantity}: n={fit.n}, mean {fit.mean:.4g} {unit} "
        f"[95% {low:.4g}, {high:.4g}], median {fit.median:.4g} {unit} [{mlow:.4g}, {mhigh:.4g}]"
        + (f", {fit.dropped} non-positive set aside" if fit.dropped else ""),
        f"  chosen: {describe_latency(fit.chosen)} ({fit.reason})",
    ]
    if fit.param_ci:
        cis = ", ".join(f"{k} in [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in fit.param_ci.items())
        lines.append(f"  95% bootstrap intervals: {cis}")
    tail = fit.tail
    if tail.capped:
        retries = f", cap_retries={tail.cap_retries}" if tail.cap_retries else ""
        lines.append(
            f"  tail: {tail.reason}: fitted with those right-censored -> cap={tail.cap:.4g}"
            f"{retries}" + (" (a lower bound on the client's retries)" if tail.cap_retries else "")
        )
    elif tail.n:
        lines.append(f"  tail: {tail.reason}")
    if fit.relative_uncertainty > 0.2:
        lines.append(
            f"  uncertain: the mean is known to +-{fit.relative_uncertainty:.0%} only; "
            "more runs would narrow it"
        )
    for f in fit.fits:
        params = ", ".join(f"{k}={v:.4g}" for k, v in f.params.items())
        lines.append(
            f"  {f.family:<11} AIC {f.aic:10.1f}  KS D={f.ks_statistic:.3f} "
            f"p={f.ks_pvalue:.2g}  mean {f.mean:.4g} {unit}  ({params})"
        )
    return lines
