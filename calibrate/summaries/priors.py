"""Priors: what is believed about a scenario's parameters before any run is seen.

Each inferred parameter, named by its scenario path ("rollout.scale"), has one of three
independent priors, or is held fixed:

    loguniform [low, high]   a positive scale known to an order of magnitude
    uniform    [low, high]   a share, or a spread on a bounded range
    lognormal  [median, s]   a positive value known roughly

The inference works in each prior's working space (the log for loguniform and
lognormal), where every prior is uniform or normal and the sampler's kernel a Gaussian.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats

from pxn.errors import PxnError
from pxn.fields import is_number

KINDS = ("loguniform", "uniform", "lognormal")
# The interquartile range of a standard normal: a normal prior's IQR is this times its sd.
NORMAL_IQR = 2 * scipy.stats.norm.ppf(0.75)


@dataclass(frozen=True)
class Prior:
    """One parameter's prior: `kind` with its two numbers (see the module docstring)."""

    kind: str
    a: float
    b: float

    @property
    def logarithmic(self) -> bool:
        return self.kind != "uniform"

    def to_working(self, value: float | np.ndarray) -> float | np.ndarray:
        return np.log(value) if self.logarithmic else value

    def from_working(self, z: float | np.ndarray) -> float | np.ndarray:
        return np.exp(z) if self.logarithmic else z

    def working_bounds(self) -> tuple[float, float]:
        """Where the working-space density is positive."""
        if self.kind == "lognormal":
            return -math.inf, math.inf
        return float(self.to_working(self.a)), float(self.to_working(self.b))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draws in working space."""
        if self.kind == "lognormal":
            return rng.normal(math.log(self.a), self.b, size)
        low, high = self.working_bounds()
        return rng.uniform(low, high, size)

    def log_density(self, z: np.ndarray) -> np.ndarray:
        """Log density in working space (-inf outside the support)."""
        if self.kind == "lognormal":
            return scipy.stats.norm.logpdf(z, math.log(self.a), self.b)
        low, high = self.working_bounds()
        inside = (z >= low) & (z <= high)
        return np.where(inside, -math.log(high - low), -np.inf)

    def working_iqr(self) -> float:
        if self.kind == "lognormal":
            return NORMAL_IQR * self.b
        low, high = self.working_bounds()
        return (high - low) / 2

    def describe(self) -> str:
        if self.kind == "lognormal":
            return f"lognormal, median {self.a:.4g}, log-sd {self.b:.3g}"
        return f"{self.kind} [{self.a:.4g}, {self.b:.4g}]"

    @classmethod
    def parse(cls, data: Any, path: str) -> Prior | float:
        """A prior from its TOML form, or the number a parameter is held at."""
        what = f"prior of {path!r}"
        if is_number(data):
            return float(data)
        if not (isinstance(data, dict) and len(data) == 1):
            raise PxnError(
                f"is a number (held fixed) or one of {', '.join(KINDS)} = [a, b]", subject=what
            )
        ((kind, pair),) = data.items()
        if kind not in KINDS:
            raise PxnError(f"has an unknown kind {kind!r} ({', '.join(KINDS)})", subject=what)
        if not (isinstance(pair, list) and len(pair) == 2 and all(map(is_number, pair))):
            raise PxnError(f"{kind} takes two numbers, [a, b]: got {pair!r}", subject=what)
        a, b = map(float, pair)
        if kind == "lognormal" and not (a > 0 and b > 0):
            raise PxnError(f"lognormal takes [median > 0, log-sd > 0]: got {pair}", subject=what)
        if kind == "loguniform" and not (0 < a < b):
            raise PxnError(
                f"loguniform takes [low, high] with 0 < low < high: got {pair}", subject=what
            )
        if kind == "uniform" and not (a < b):
            raise PxnError(f"uniform takes [low, high] with low < high: got {pair}", subject=what)
        return cls(kind, a, b)


@dataclass(frozen=True)
class Priors:
    """The inferred parameters' priors, in a fixed order, and the parameters held fixed."""

    paths: tuple[str, ...]
    priors: tuple[Prior, ...]
    fixed: dict[str, float]

    def __len__(self) -> int:
        return len(self.paths)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """(size, d) draws in working space."""
        return np.column_stack([p.sample(rng, size) for p in self.priors])

    def log_density(self, z: np.ndarray) -> np.ndarray:
        """Log prior density of each row of (n, d) working-space points."""
        return sum(p.log_density(z[:, i]) for i, p in enumerate(self.priors))

    def values(self, z: np.ndarray) -> dict[str, float]:
        """One working-space point as parameter values, the fixed ones included."""
        drawn = {path: float(p.from_working(z[i])) for i, (path, p) in enumerate(self)}
        return self.fixed | drawn

    def __iter__(self):
        return iter(zip(self.paths, self.priors, strict=True))


# Latencies are lognormal; a metric call from a fraction of a second (a
# classifier) to ten minutes (an agent with tools); a reflection from one
# second to ten minutes. Acceptance from rare to most proposals; the
# correlation of siblings from none to strong.
DEFAULT_PRIORS: dict[str, Prior] = {
    "rollout.scale": Prior("loguniform", 0.1, 600.0),
    "rollout.s": Prior("uniform", 0.05, 2.5),
    "reflection.scale": Prior("loguniform", 1.0, 600.0),
    "reflection.s": Prior("uniform", 0.05, 1.5),
    "acceptance.a0": Prior("uniform", 0.01, 0.6),
    "acceptance.correlation": Prior("uniform", 0.0, 0.6),
}
# Inferred when a fact is a score, instead of acceptance's: the seed from any score
# to any other; examples from alike to very different; a proposal from a mean loss to
# a large mean gain and from a sure step to a wild one; a ceiling anywhere (at or
# below the seed's score, no proposal improves on the seed); a child from keeping
# nothing of its parent's luck to nearly all; evaluations from deterministic to
# noisier than the examples differ.
QUALITY_PRIORS: dict[str, Prior] = {
    "quality.seed_score": Prior("uniform", 0.02, 0.98),
    "quality.difficulty_sd": Prior("uniform", 0.0, 3.0),
    "quality.change_mean": Prior("uniform", -0.5, 1.0),
    "quality.change_sd": Prior("uniform", 0.01, 1.5),
    "quality.ceiling": Prior("uniform", 0.05, 1.0),
    "quality.inherit": Prior("uniform", 0.0, 0.99),
    "quality.eval_noise": Prior("uniform", 0.0, 2.0),
}
# Inferred only when a fact is in dollars: the mean tokens of a call, from a
# short answer to a long one (a reflection's input per minibatch example is
# the example, its output and its feedback as gepa shows them).
TOKEN_PRIORS: dict[str, Prior] = {
    "tokens.rollout_input.scale": Prior("loguniform", 50.0, 20000.0),
    "tokens.rollout_output.scale": Prior("loguniform", 10.0, 5000.0),
    "tokens.reflection_input_per_example": Prior("loguniform", 100.0, 10000.0),
    "tokens.reflection_output.scale": Prior("loguniform", 100.0, 20000.0),
}
