"""Distribution: a non-negative random quantity, a call's latency or its tokens.

In TOML a latency may also be a typical value and a spread, read as the lognormal
that matches them (`lognormal_from`).
"""

from __future__ import annotations

import difflib
import math
import warnings
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import numpy as np
import scipy.integrate
import scipy.stats

from pxn.durations import parse_duration
from pxn.errors import PxnError
from pxn.fields import at_least, is_number, known_keys, whole

EMPIRICAL = "empirical"


@cache
def continuous_distribution_names() -> tuple[str, ...]:
    return tuple(
        sorted(
            name
            for name in dir(scipy.stats)
            if isinstance(getattr(scipy.stats, name), scipy.stats.rv_continuous)
        )
    )


def _lognorm(rng: np.random.Generator, size: int, s: float, loc=0.0, scale=1.0) -> np.ndarray:
    return np.exp(s * rng.standard_normal(size)) * scale + loc


def _gamma(rng: np.random.Generator, size: int, a: float, loc=0.0, scale=1.0) -> np.ndarray:
    return rng.standard_gamma(a, size) * scale + loc


def _expon(rng: np.random.Generator, size: int, loc=0.0, scale=1.0) -> np.ndarray:
    return rng.standard_exponential(size) * scale + loc


# The commonest families drawn straight from numpy as scipy's rvs draws them (equal to the
# bit, tested), without its argument handling, which costs more than the draw.
DIRECT_SAMPLERS = {"lognorm": _lognorm, "gamma": _gamma, "expon": _expon}


@dataclass(frozen=True)
class Distribution:
    """`dist` is a scipy.stats continuous distribution name with `params` its shape
    parameters, loc and scale as scipy names them; or "empirical" with `samples`
    the observed values to resample from (times `params["scale"]`, 1 unless
    said). A single sample is a constant.

    With `cap` every call ends by the cap. With `cap_retries = 0` a draw past it
    takes exactly the cap (a reply cut at max_tokens); with n > 0 a call
    reaching the cap is abandoned there and tried again, up to n more times,
    each try a fresh draw (a client timeout with retries), so it takes the
    caps it hit plus its last try.
    """

    dist: str
    params: dict[str, float] = field(default_factory=dict)
    samples: tuple[float, ...] = ()
    cap: float | None = None
    cap_retries: int = 0

    @property
    def empirical(self) -> bool:
        return self.dist == EMPIRICAL

    def _family(self) -> Any:
        """The scipy distribution, to call with the params as keywords (not for "empirical"):
        no frozen scipy object is built per parameter draw."""
        return getattr(scipy.stats, self.dist)

    def uncapped_sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.empirical:
            draws = rng.choice(np.asarray(self.samples), size=size)
            scale = self.params.get("scale", 1.0)
            return draws * scale if scale != 1.0 else draws
        direct = DIRECT_SAMPLERS.get(self.dist)
        if direct is not None:
            return direct(rng, size, **self.params)
        return self._family().rvs(size=size, random_state=rng, **self.params)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        draws = self.uncapped_sample(rng, size)
        if self.cap is None:
            return draws
        total = np.minimum(draws, self.cap)
        over = draws > self.cap
        for _ in range(self.cap_retries):  # each timed-out try is tried again
            if not over.any():
                break
            again = self.uncapped_sample(rng, int(over.sum()))
            total[over] += np.minimum(again, self.cap)
            over[over] = again > self.cap
        return total

    def survival(self, x: float) -> float:
        """P(a draw, before the cap, exceeds x)."""
        if self.empirical:
            return float(np.mean(np.asarray(self.samples) * self.params.get("scale", 1.0) > x))
        return float(self._family().sf(x, **self.params))

    def uncapped_mean(self) -> float:
        if self.empirical:
            return float(np.mean(self.samples)) * self.params.get("scale", 1.0)
        return float(self._family().mean(**self.params))

    def mean(self) -> float:
        """The mean of a call, cap and retries included."""
        return self._mean

    @cached_property
    def _mean(self) -> float:
        """mean(), worked out once: with a cap it is an integral."""
        if self.cap is None:
            return self.uncapped_mean()
        if self.empirical:
            scaled = np.asarray(self.samples) * self.params.get("scale", 1.0)
            one_try = float(np.mean(np.minimum(scaled, self.cap)))
        else:  # E[min(X, c)] is the survival function's area up to c
            family, params = self._family(), self.params
            area = scipy.integrate.quad(lambda x: family.sf(x, **params), 0, self.cap, limit=200)
            one_try = float(area[0])
        timeout = self.survival(self.cap)
        tries = sum(timeout**i for i in range(self.cap_retries + 1))
        return one_try * tries

    def validate(self, what: str, unit: str = "seconds") -> None:
        not_finite = [k for k, v in self.params.items() if not (is_number(v) and math.isfinite(v))]
        if not_finite:
            name = not_finite[0]
            raise PxnError(f"{name} must be a finite number: got {self.params[name]!r}",
                           subject=what)  # fmt: skip
        if self.empirical:
            if not self.samples:
                raise PxnError("an empirical distribution needs a non-empty 'samples' list",
                               subject=what)  # fmt: skip
            bad = next(
                (i for i, x in enumerate(self.samples) if not math.isfinite(x) or x < 0), None
            )
            if bad is not None:
                raise PxnError(f"samples[{bad}] is {self.samples[bad]!r}: samples must be finite "
                               f"and >= 0 {unit}", subject=what)  # fmt: skip
            at_least(self.params.get("scale", 1.0), f"{what} scale")
            unknown = sorted(set(self.params) - {"scale"})
            if unknown:
                raise PxnError(f"an empirical distribution takes no {unknown[0]!r}", subject=what)
        else:
            self._validate_family(what)
        if self.cap is not None and not (is_number(self.cap) and 0 < self.cap < math.inf):
            raise PxnError(f"cap must be a number > 0 {unit}: got {self.cap!r}", subject=what)
        whole(self.cap_retries, f"{what} cap_retries", least=0)
        if self.cap_retries and self.cap is None:
            raise PxnError("cap_retries needs a cap (the timeout the tries end at)", subject=what)
        if self.cap is not None and self.cap_retries and self.survival(self.cap) >= 1:
            raise PxnError(
                f"every try lasts past the cap {self.cap:g} {unit}: the retries never succeed",
                subject=what,
            )

    def _validate_family(self, what: str) -> None:
        names = continuous_distribution_names()
        if self.dist not in names:
            close = difflib.get_close_matches(self.dist, (*names, EMPIRICAL), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PxnError(
                f"has an unknown distribution {self.dist!r}{hint} "
                "(any scipy.stats continuous distribution, or 'empirical')",
                subject=what,
            )
        try:
            # Extreme parameters overflow inside scipy: its warnings would break the
            # one line this check ends in.
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                family = self._family()
                low, mean = family.support(**self.params)[0], family.mean(**self.params)
        except TypeError as exc:
            raise PxnError(f"has bad parameters for {self.dist}: {exc}", subject=what) from None
        if not np.isfinite(mean) or low < 0:
            raise PxnError(
                f"{self.dist} with {self.params} must have a finite mean and no negative values "
                f"(its support starts at {low})",
                subject=what,
            )

    def to_dict(self) -> dict[str, Any]:
        if self.empirical:
            data: dict[str, Any] = {"dist": EMPIRICAL, "samples": list(self.samples)}
            if self.params.get("scale", 1.0) != 1.0:
                data["scale"] = self.params["scale"]
        else:
            data = {"dist": self.dist, **self.params}
        if self.cap is not None:
            data["cap"] = self.cap
        if self.cap_retries:
            data["cap_retries"] = self.cap_retries
        return data

    @classmethod
    def from_dict(cls, data: Any, what: str, unit: str = "seconds") -> Distribution:
        """A table of `dist` and its parameters, or of a typical value and spread
        (`lognormal_from`); `unit` is what its values count, seconds or tokens."""
        if isinstance(data, dict) and "dist" not in data and set(data) & set(SUMMARY_KEYS):
            return lognormal_from(data, what, unit)
        if not isinstance(data, dict) or "dist" not in data:
            raise PxnError(f"is a table: {_example(unit)}, or dist and its parameters",
                           subject=what)  # fmt: skip
        data = dict(data)
        summary = [key for key in SUMMARY_KEYS if key in data]
        if summary:
            raise PxnError(
                f"gives dist and {summary[0]}: {', '.join(SUMMARY_KEYS)} describe a lognormal "
                "without dist; give those, or dist and its own parameters",
                subject=what,
            )
        dist = data.pop("dist")
        bounds = _bounds(data, what, unit)
        if dist == EMPIRICAL:
            samples = data.pop("samples", ())
            if not isinstance(samples, list) or not all(is_number(x) for x in samples):
                raise PxnError("samples must be a list of numbers", subject=what)
            return cls(EMPIRICAL, params=data, samples=tuple(map(float, samples)), **bounds)
        bad = [k for k, v in data.items() if not is_number(v)]
        if bad:
            raise PxnError(f"parameter(s) {', '.join(bad)} must be numbers", subject=what)
        return cls(dist, params={k: float(v) for k, v in data.items()}, **bounds)


# A latency as people know it: a typical value and how far calls spread, no family named.
SUMMARY_KEYS = ("median", "p90", "spread", "mean", "sd")
SUMMARY_FORMS = (("median", "p90"), ("median", "spread"), ("mean", "sd"))
Z90 = float(scipy.stats.norm.ppf(0.9))  # a normal's 90th percentile, in sds above its mean
EXAMPLES = {"seconds": ('"4s"', '"9s"'), "tokens": ("800", "1500")}  # a median, a p90


def lognormal_from(data: dict[str, Any], what: str, unit: str = "seconds") -> Distribution:
    """The lognormal whose median and p90, median and spread (its log-sd s), or mean and
    sd are those given: scale = median and s = ln(p90 / median) / z_0.9, or
    s^2 = ln(1 + (sd / mean)^2) and scale = mean exp(-s^2 / 2). A `cap` and
    `cap_retries` may come with them, as with any latency.
    """
    data = dict(data)
    bounds = _bounds(data, what, unit)
    known_keys(data, set(SUMMARY_KEYS), what)
    form = next((f for f in SUMMARY_FORMS if set(f) == set(data)), None)
    if form is None:
        raise PxnError(_form_problem([key for key in SUMMARY_KEYS if key in data], unit),
                       subject=what)  # fmt: skip
    first, second = (
        _amount(data[key], f"{what} {key}", "the log-sd" if key == "spread" else unit)
        for key in form
    )
    if form == ("median", "p90"):
        if second <= first:
            raise PxnError(
                f"{_text(second, unit)} is not above the median {_text(first, unit)}: 9 calls "
                "in 10 end within p90, half within the median",
                subject=f"{what} p90",
            )
        s, scale = math.log(second / first) / Z90, first
    elif form == ("median", "spread"):
        s, scale = second, first
    else:
        s = math.sqrt(math.log1p((second / first) ** 2))
        scale = first * math.exp(-(s**2) / 2)
    return Distribution("lognorm", {"s": s, "scale": scale}, **bounds)


def _form_problem(given: list[str], unit: str) -> str:
    """What is wrong with the summary keys given, and the fix."""
    median, p90 = EXAMPLES[unit]
    if given == ["median"]:
        return (
            "gives a median but not how far calls spread: add p90 (9 calls in 10 end within it, "
            f"e.g. p90 = {p90}) or spread (the log-sd, e.g. spread = 0.5)"
        )
    if given == ["mean"]:
        return "gives a mean but not how far calls spread: add sd (the standard deviation)"
    return (
        f"gives {' and '.join(given)}: give median with p90, median with spread (the log-sd), "
        f"or mean with sd, e.g. median = {median}, p90 = {p90}"
    )


def _bounds(data: dict[str, Any], what: str, unit: str) -> dict[str, Any]:
    """Take `cap` (a duration for a latency, like any of its values) and `cap_retries` out."""
    cap = data.pop("cap", None)
    if isinstance(cap, str):
        cap = _amount(cap, f"{what} cap", unit)
    return {"cap": cap, "cap_retries": data.pop("cap_retries", 0)}


def _amount(value: Any, what: str, unit: str) -> float:
    """A value > 0 in `unit`; a latency's may be a duration with its unit ("4s", "2.5 min")."""
    if unit == "seconds" and isinstance(value, str):
        return parse_duration(value, what)
    if not (is_number(value) and value > 0):
        kind = 'seconds, or a duration with its unit like "4s"' if unit == "seconds" else unit
        raise PxnError(f"must be a number > 0 ({kind}): got {value!r}", subject=what)
    return float(value)


def _text(value: float, unit: str) -> str:
    return f"{value:g} s" if unit == "seconds" else f"{value:g} {unit}"


def _example(unit: str) -> str:
    median, p90 = EXAMPLES[unit]
    return f"a median with p90 or spread (median = {median}, p90 = {p90})"
