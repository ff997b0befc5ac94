"""Scenario: everything the simulator needs to predict one batched GEPA run.

A scenario is the workload and the machine (budget, data sizes, worker pool,
latencies, acceptance); the shape P x N is what you vary over it. Scenarios
load from TOML and write back to it, and every mistake in one is reported as a
`PxnError` naming the field and the fix.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats
import tomli_w

from pxn.errors import PxnError
from pxn.files import write_text_atomically

SELECTIONS = ("all", "best", "topk")


@cache
def continuous_distribution_names() -> tuple[str, ...]:
    return tuple(
        sorted(
            name
            for name in dir(scipy.stats)
            if isinstance(getattr(scipy.stats, name), scipy.stats.rv_continuous)
        )
    )


@dataclass(frozen=True)
class Distribution:
    """A non-negative random quantity: a call's latency in seconds, or its tokens.

    `dist` is any scipy.stats continuous distribution name with `params` its
    shape parameters, loc and scale (as scipy names them), or "empirical" with
    `samples` the observed values to resample from. A single sample gives a
    constant.
    """

    dist: str
    params: dict[str, float] = field(default_factory=dict)
    samples: tuple[float, ...] = ()

    def frozen(self) -> Any:
        """The frozen scipy distribution (not for "empirical")."""
        return _frozen(self.dist, tuple(sorted(self.params.items())))

    def mean(self) -> float:
        if self.dist == "empirical":
            return float(np.mean(self.samples))
        return float(self.frozen().mean())

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.dist == "empirical":
            return rng.choice(np.asarray(self.samples), size=size)
        return self.frozen().rvs(size=size, random_state=rng)

    def validate(self, what: str, unit: str = "seconds") -> None:
        if self.dist == "empirical":
            if not self.samples:
                raise PxnError(
                    f"{what}: an empirical distribution needs a non-empty 'samples' list"
                )
            if min(self.samples) < 0:
                raise PxnError(f"{what}: samples must be >= 0 {unit}")
            return
        names = continuous_distribution_names()
        if self.dist not in names:
            close = difflib.get_close_matches(self.dist, (*names, "empirical"), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PxnError(
                f"{what}: unknown distribution {self.dist!r}{hint} "
                "(any scipy.stats continuous distribution, or 'empirical')"
            )
        try:
            dist = self.frozen()
            low, mean = dist.support()[0], dist.mean()
        except TypeError as exc:
            raise PxnError(f"{what}: bad parameters for {self.dist}: {exc}") from None
        if not np.isfinite(mean) or low < 0:
            raise PxnError(
                f"{what}: {self.dist} with {self.params} must have a finite mean and no "
                f"negative values (support starts at {low})"
            )

    def to_dict(self) -> dict[str, Any]:
        if self.dist == "empirical":
            return {"dist": "empirical", "samples": list(self.samples)}
        return {"dist": self.dist, **self.params}

    @classmethod
    def from_dict(cls, data: Any, what: str) -> Distribution:
        if not isinstance(data, dict) or "dist" not in data:
            raise PxnError(f"{what}: a distribution is a table with 'dist' and its parameters")
        data = dict(data)
        dist = data.pop("dist")
        if dist == "empirical":
            return cls("empirical", samples=tuple(float(x) for x in data.get("samples", ())))
        bad = [k for k, v in data.items() if not isinstance(v, int | float)]
        if bad:
            raise PxnError(f"{what}: parameter(s) {', '.join(bad)} must be numbers")
        return cls(dist, params={k: float(v) for k, v in data.items()})


@cache
def _frozen(dist: str, params: tuple[tuple[str, float], ...]) -> Any:
    return getattr(scipy.stats, dist)(**dict(params))


@dataclass(frozen=True)
class Acceptance:
    """Probability that a proposal beats its parent on the minibatch.

    Constant `a0`, or decaying a(i) = a0 * exp(-i / tau) over the i proposals
    made before it, when `tau` is set.
    """

    a0: float
    tau: float | None = None

    def probability(self, proposals_made: int | np.ndarray) -> float | np.ndarray:
        if self.tau is None:
            return self.a0
        return self.a0 * np.exp(-np.asarray(proposals_made) / self.tau)

    def validate(self) -> None:
        if not 0.0 <= self.a0 <= 1.0:
            raise PxnError(f"acceptance a0 must be a probability in [0, 1]: got {self.a0}")
        if self.tau is not None and not self.tau > 0:
            raise PxnError(f"acceptance tau must be > 0 proposals: got {self.tau}")


def _number(table: dict[str, Any], key: str, what: str, default: Any = None) -> Any:
    value = table.get(key, default)
    if value is not default and not (isinstance(value, int | float) and value >= 0):
        raise PxnError(f"{what}.{key} must be a number >= 0: got {value!r}")
    return value


def _table(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise PxnError(f"{what} must be a table")
    return data


def _known_keys(table: dict[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PxnError(f"{what}: unknown field {unknown[0]!r}{hint}")


@dataclass(frozen=True)
class Tokens:
    """Tokens per call: what dollars and tokens-per-minute limits are counted in.

    A rollout's input and output tokens are drawn per call. A reflection's
    input is its prompt, the parent's text and one record per minibatch
    example, so it grows with b: base + per_example * b. Its latency was
    measured at b = `measured_minibatch`; at another b it shifts by
    seconds_per_input_token times the change in input (calibrate's
    latency-against-tokens fit; 0 when none was made).
    """

    rollout_input: Distribution
    rollout_output: Distribution
    reflection_output: Distribution
    reflection_input_base: float
    reflection_input_per_example: float
    measured_minibatch: int
    reflection_seconds_per_input_token: float = 0.0

    def reflection_input(self, minibatch: int) -> float:
        return self.reflection_input_base + self.reflection_input_per_example * minibatch

    def reflection_latency_shift(self, minibatch: int) -> float:
        """Seconds a reflection at this b takes beyond one at the measured b."""
        extra_input = self.reflection_input_per_example * (minibatch - self.measured_minibatch)
        return self.reflection_seconds_per_input_token * extra_input

    def validate(self) -> None:
        for name in ("rollout_input", "rollout_output", "reflection_output"):
            getattr(self, name).validate(f"tokens.{name}", unit="tokens")
        for name in (
            "reflection_input_base",
            "reflection_input_per_example",
            "reflection_seconds_per_input_token",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value >= 0):
                raise PxnError(f"tokens.{name} must be a number >= 0: got {value!r}")
        if not (isinstance(self.measured_minibatch, int) and self.measured_minibatch >= 1):
            raise PxnError(
                f"tokens.measured_minibatch must be a whole number >= 1: "
                f"got {self.measured_minibatch!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "reflection_input_base": self.reflection_input_base,
            "reflection_input_per_example": self.reflection_input_per_example,
            "reflection_seconds_per_input_token": self.reflection_seconds_per_input_token,
            "measured_minibatch": self.measured_minibatch,
            "rollout_input": self.rollout_input.to_dict(),
            "rollout_output": self.rollout_output.to_dict(),
            "reflection_output": self.reflection_output.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any, minibatch: int) -> Tokens:
        """`minibatch`: the scenario's b, the measured one unless the table says otherwise."""
        table = _table(data, "[tokens]")
        _known_keys(table, set(cls.__dataclass_fields__), "[tokens]")
        missing = [
            name
            for name in (
                "rollout_input",
                "rollout_output",
                "reflection_output",
                "reflection_input_base",
                "reflection_input_per_example",
            )
            if name not in table
        ]
        if missing:
            raise PxnError(f"[tokens]: missing field(s) {', '.join(missing)}")
        return cls(
            rollout_input=Distribution.from_dict(table["rollout_input"], "tokens.rollout_input"),
            rollout_output=Distribution.from_dict(table["rollout_output"], "tokens.rollout_output"),
            reflection_output=Distribution.from_dict(
                table["reflection_output"], "tokens.reflection_output"
            ),
            reflection_input_base=table["reflection_input_base"],
            reflection_input_per_example=table["reflection_input_per_example"],
            measured_minibatch=table.get("measured_minibatch", minibatch),
            reflection_seconds_per_input_token=table.get("reflection_seconds_per_input_token", 0.0),
        )


@dataclass(frozen=True)
class Prices:
    """Dollars per million tokens, for the task model and the reflection model.

    A model name alone is priced from litellm's offline price table at load
    time (pxn.prices); numbers given by hand win over the table. With nothing
    said about the reflection model, it is the task model.
    """

    task_input: float
    task_output: float
    reflection_input: float
    reflection_output: float
    task_model: str = ""
    reflection_model: str = ""

    def validate(self) -> None:
        for name in ("task_input", "task_output", "reflection_input", "reflection_output"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value >= 0):
                raise PxnError(
                    f"prices.{name} must be dollars per million tokens >= 0: got {value!r}"
                )

    def to_dict(self) -> dict[str, Any]:
        names = {"task_model": self.task_model, "reflection_model": self.reflection_model}
        return {k: v for k, v in names.items() if v} | {
            "task_input": self.task_input,
            "task_output": self.task_output,
            "reflection_input": self.reflection_input,
            "reflection_output": self.reflection_output,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Prices:
        table = _table(data, "[prices]")
        _known_keys(table, set(cls.__dataclass_fields__), "[prices]")
        task_model = str(table.get("task_model", ""))
        reflection_model = str(table.get("reflection_model", task_model))

        def side(role: str, model: str) -> tuple[float, float]:
            given = (
                _number(table, f"{role}_input", "prices"),
                _number(table, f"{role}_output", "prices"),
            )
            if None not in given:
                return given
            if not model:
                raise PxnError(
                    f"[prices]: give {role}_input and {role}_output (dollars per million "
                    f"tokens) or {role}_model, a model name litellm prices"
                )
            from pxn.prices import litellm_prices

            looked_up = litellm_prices(model)
            return tuple(g if g is not None else t for g, t in zip(given, looked_up, strict=True))

        task = side("task", task_model)
        reflection_given = {"reflection_model", "reflection_input", "reflection_output"} & set(
            table
        )
        # Nothing said about the reflection model: it is the task model, at its prices.
        reflection = side("reflection", reflection_model) if reflection_given else task
        return cls(*task, *reflection, task_model, reflection_model)


@dataclass(frozen=True)
class RateLimit:
    """A provider's limits on one model: requests and tokens per minute (None: no limit)."""

    rpm: float | None = None
    tpm: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in (("rpm", self.rpm), ("tpm", self.tpm)) if v is not None}


@dataclass(frozen=True)
class RateLimits:
    """Rate limits on the task model (rollouts) and the reflection model.

    Each limit is a token bucket that holds `burst_seconds` worth of its
    per-minute allowance and refills continuously; a call waits until its
    bucket can pay for it, as a client that backs off on 429s ends up doing.
    The two models' buckets are separate (two models, or two API keys).
    """

    task: RateLimit = RateLimit()
    reflection: RateLimit = RateLimit()
    burst_seconds: float = 60.0

    @property
    def limited(self) -> bool:
        """Whether any model has a limit (burst_seconds alone limits nothing)."""
        return bool(self.task.to_dict() or self.reflection.to_dict())

    def validate(self, has_tokens: bool) -> None:
        for role, limit in (("task", self.task), ("reflection", self.reflection)):
            for name, value in (("rpm", limit.rpm), ("tpm", limit.tpm)):
                if value is not None and not (isinstance(value, int | float) and value > 0):
                    raise PxnError(
                        f"rate_limits.{role}.{name} must be > 0 per minute: got {value!r}"
                    )
            if limit.tpm is not None and not has_tokens:
                raise PxnError(
                    f"rate_limits.{role}.tpm counts tokens: the scenario needs a [tokens] "
                    "table (pxn calibrate writes one from traces with token counts)"
                )
        if not (isinstance(self.burst_seconds, int | float) and self.burst_seconds > 0):
            raise PxnError(f"rate_limits.burst_seconds must be > 0: got {self.burst_seconds!r}")

    def to_dict(self) -> dict[str, Any]:
        tables = {"task": self.task.to_dict(), "reflection": self.reflection.to_dict()}
        return {"burst_seconds": self.burst_seconds} | {k: v for k, v in tables.items() if v}

    @classmethod
    def from_dict(cls, data: Any) -> RateLimits:
        table = _table(data, "[rate_limits]")
        _known_keys(table, {"task", "reflection", "burst_seconds"}, "[rate_limits]")
        limits = {}
        for role in ("task", "reflection"):
            sub = _table(table.get(role, {}), f"[rate_limits.{role}]")
            _known_keys(sub, {"rpm", "tpm"}, f"[rate_limits.{role}]")
            limits[role] = RateLimit(sub.get("rpm"), sub.get("tpm"))
        return cls(limits["task"], limits["reflection"], table.get("burst_seconds", 60.0))


@dataclass(frozen=True)
class Shape:
    """P parents per step, N mutations per parent: k = P * N proposals per iteration."""

    p: int
    n: int

    @property
    def k(self) -> int:
        return self.p * self.n

    @property
    def label(self) -> str:
        return "single" if self.k == 1 else f"{self.p}x{self.n}"

    def __str__(self) -> str:
        return f"{self.p}x{self.n}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        text = text.strip().lower()
        if text == "single":
            return cls(1, 1)
        match = re.fullmatch(r"(\d+)\s*x\s*(\d+)", text)
        if not match:
            raise PxnError(f"a shape is 'PxN' (like 2x4) or 'single': got {text!r}")
        p, n = int(match[1]), int(match[2])
        if p < 1 or n < 1:
            raise PxnError(f"P x N needs P, N >= 1: got {text!r}")
        return cls(p, n)


def parse_shapes(text: str) -> list[Shape]:
    return [Shape.parse(part) for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class Scenario:
    """One workload on one machine; see the README for each field's meaning."""

    name: str
    budget: int  # B, metric calls
    valset_size: int  # V
    trainset_size: int
    workers: int  # W rollout slots
    rollout: Distribution  # one metric call
    reflection: Distribution  # one reflection LM call
    acceptance: Acceptance
    minibatch: int = 3  # b
    reflection_concurrency: int = 10  # gepa's own LM batches reflections 10 at a time
    stage_overhead: float = 0.0  # seconds of gepa's own work before each stage
    skip_perfect: float = 0.0  # probability a parent's minibatch is all-perfect (gepa skips it)
    selection: str = "all"  # all | best | topk:K, as gepa's selection strategies
    seed: int = 0
    description: str = ""
    # The LM backend serves at most this many calls at once, rollouts and
    # reflections alike (a local pool of single-request servers); calls beyond it
    # wait for a server. None: no limit beyond W and C (a hosted API).
    lm_servers: int | None = None
    # beta: a call served while m calls are served (itself included) takes
    # 1 + beta * (m - 1) times its drawn latency (servers sharing a CPU). 0: none.
    load_slowdown: float = 0.0
    # Dollars and provider limits; all optional (a scenario without them has no
    # cost and no throttling).
    tokens: Tokens | None = None
    prices: Prices | None = None
    rate_limits: RateLimits = RateLimits()

    @property
    def selection_limit(self) -> int | None:
        """How many accepted proposals per iteration go to full validation (None: all)."""
        if self.selection == "all":
            return None
        if self.selection == "best":
            return 1
        return int(self.selection.split(":", 1)[1])

    def validate(self) -> Scenario:
        positive = {
            "budget": self.budget,
            "valset_size": self.valset_size,
            "trainset_size": self.trainset_size,
            "workers": self.workers,
            "minibatch": self.minibatch,
            "reflection_concurrency": self.reflection_concurrency,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise PxnError(f"{name} must be a whole number >= 1: got {value!r}")
        if self.budget < self.valset_size:
            raise PxnError(
                f"budget {self.budget} is smaller than one seed validation of "
                f"V={self.valset_size}; raise the budget or shrink the valset"
            )
        if self.minibatch > self.trainset_size:
            raise PxnError(
                f"minibatch {self.minibatch} is larger than the trainset ({self.trainset_size})"
            )
        if not self.stage_overhead >= 0:
            raise PxnError(f"stage_overhead must be >= 0 seconds: got {self.stage_overhead}")
        if not 0.0 <= self.skip_perfect < 1.0:
            raise PxnError(f"skip_perfect must be in [0, 1): got {self.skip_perfect}")
        if self.lm_servers is not None and (
            not isinstance(self.lm_servers, int) or self.lm_servers < 1
        ):
            raise PxnError(
                f"lm_servers must be a whole number >= 1 (or left out for no limit): "
                f"got {self.lm_servers!r}"
            )
        if not (isinstance(self.load_slowdown, int | float) and self.load_slowdown >= 0):
            raise PxnError(
                f"load_slowdown must be >= 0 (0: latency independent of load): "
                f"got {self.load_slowdown!r}"
            )
        if not re.fullmatch(r"all|best|topk:[1-9]\d*", self.selection):
            raise PxnError(f"selection is all, best or topk:K with K >= 1: got {self.selection!r}")
        self.rollout.validate("rollout latency")
        self.reflection.validate("reflection latency")
        self.acceptance.validate()
        if self.tokens is not None:
            self.tokens.validate()
        if self.prices is not None:
            if self.tokens is None:
                raise PxnError(
                    "[prices] needs a [tokens] table to count what is paid for "
                    "(pxn calibrate writes one from traces with token counts)"
                )
            self.prices.validate()
        self.rate_limits.validate(has_tokens=self.tokens is not None)
        if self.lm_servers is not None and self.rate_limits.limited:
            # The two models disagree on who holds a server while waiting for
            # allowance, so the combination is refused rather than guessed.
            raise PxnError(
                "lm_servers (your own LM servers) and [rate_limits] (a hosted provider's "
                "limits) cannot be combined: drop lm_servers and load_slowdown to model "
                "a provider, or [rate_limits] to model your servers"
            )
        return self

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed, validated again."""
        data = {**self.__dict__, **changes}
        return Scenario(**data).validate()

    def to_dict(self) -> dict[str, Any]:
        top = {
            "name": self.name,
            "description": self.description,
            "budget": self.budget,
            "valset_size": self.valset_size,
            "trainset_size": self.trainset_size,
            "minibatch": self.minibatch,
            "workers": self.workers,
            "reflection_concurrency": self.reflection_concurrency,
            "stage_overhead": self.stage_overhead,
            "skip_perfect": self.skip_perfect,
            "selection": self.selection,
            "seed": self.seed,
            "rollout": self.rollout.to_dict(),
            "reflection": self.reflection.to_dict(),
            "acceptance": {"a0": self.acceptance.a0}
            | ({} if self.acceptance.tau is None else {"tau": self.acceptance.tau}),
        }
        # Written only when set, so scenarios without them read and write as before
        # (and TOML has no None).
        if self.lm_servers is not None:
            top["lm_servers"] = self.lm_servers
        if self.load_slowdown != 0:
            top["load_slowdown"] = self.load_slowdown
        if self.tokens is not None:
            top["tokens"] = self.tokens.to_dict()
        if self.prices is not None:
            top["prices"] = self.prices.to_dict()
        if self.rate_limits != RateLimits():
            top["rate_limits"] = self.rate_limits.to_dict()
        return top

    def to_toml(self, header: str = "") -> str:
        comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return comment + tomli_w.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "scenario") -> Scenario:
        data = dict(data)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PxnError(f"{source}: unknown field {unknown[0]!r}{hint}")
        required = ("budget", "valset_size", "trainset_size", "workers", "rollout", "reflection")
        missing = [name for name in (*required, "acceptance") if name not in data]
        if missing:
            raise PxnError(f"{source}: missing field(s) {', '.join(missing)}")
        acceptance = data.pop("acceptance")
        if not isinstance(acceptance, dict) or "a0" not in acceptance:
            raise PxnError(f"{source}: [acceptance] needs a0 (and optionally tau)")
        tau = acceptance.get("tau")
        extras: dict[str, Any] = {}
        if "tokens" in data:
            extras["tokens"] = Tokens.from_dict(
                data.pop("tokens"), data.get("minibatch", cls.minibatch)
            )
        if "prices" in data:
            extras["prices"] = Prices.from_dict(data.pop("prices"))
        if "rate_limits" in data:
            extras["rate_limits"] = RateLimits.from_dict(data.pop("rate_limits"))
        try:
            scenario = cls(
                name=str(data.pop("name", Path(source).stem)),
                rollout=Distribution.from_dict(data.pop("rollout"), "rollout latency"),
                reflection=Distribution.from_dict(data.pop("reflection"), "reflection latency"),
                acceptance=Acceptance(float(acceptance["a0"]), None if tau is None else float(tau)),
                **extras,
                **data,
            )
        except TypeError as exc:
            raise PxnError(f"{source}: {exc}") from None
        return scenario.validate()

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PxnError(f"cannot read scenario {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise PxnError(f"scenario {path} is not valid TOML: {exc}") from None
        return cls.from_dict(data, str(path))

    def save(self, path: str | Path, header: str = "") -> None:
        write_text_atomically(path, self.to_toml(header))


def mean_acceptance(acceptance: Acceptance, proposals: float) -> float:
    """The average acceptance probability over the first `proposals` proposals."""
    if acceptance.tau is None or proposals <= 0:
        return acceptance.a0
    tau = acceptance.tau
    return acceptance.a0 * tau * (1 - math.exp(-proposals / tau)) / proposals
