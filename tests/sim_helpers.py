"""Small scenarios and trace readers shared by the simulator tests."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.load import Load, Loads
from pxn.prices import Prices
from pxn.rate_limits import RateLimit, RateLimits
from pxn.scenario import Scenario
from pxn.selection import Selection
from pxn.tokens import Tokens


def fixed(seconds: float) -> Distribution:
    """A deterministic latency: an empirical distribution with one sample."""
    return Distribution("empirical", samples=(seconds,))


def lognormal(mean_seconds: float, sigma: float = 0.5) -> Distribution:
    """A lognormal latency with the given mean (scipy's s, scale parameters)."""

    return Distribution(
        "lognorm", params={"s": sigma, "scale": mean_seconds * math.exp(-(sigma**2) / 2)}
    )


def shared_pool(servers: int | None, slowdown: float) -> Loads:
    """One local pool serving both models (`--lm-servers`)."""
    return Loads(Load(servers, slowdown), Load(servers, slowdown))


def with_local_pool(scenario: Scenario, servers: int | None, slowdown: float = 0.0) -> Scenario:
    """`scenario` on one local LM pool serving both models (validated)."""
    return scenario.replace(loads=shared_pool(servers, slowdown))


def make_scenario(**changes: Any) -> Scenario:
    """A small, quick scenario; tests change the fields they are about.

    `lm_servers` and `load_slowdown` give one local LM pool serving both models.
    """
    pool = {key: changes.pop(key) for key in ("lm_servers", "load_slowdown") if key in changes}
    if pool:
        changes["loads"] = shared_pool(pool.get("lm_servers"), pool.get("load_slowdown", 0.0))
    base: dict[str, Any] = {
        "name": "small",
        "budget": 400,
        "valset_size": 20,
        "trainset_size": 50,
        "workers": 8,
        "rollout": lognormal(2.0),
        "reflection": lognormal(10.0, 0.3),
        "acceptance": Acceptance(0.3),
        "minibatch": 3,
        "reflection_concurrency": 10,
        "stage_overhead": 0.1,
        "seed": 7,
    }
    if isinstance(changes.get("selection"), str):
        changes["selection"] = Selection.parse(changes["selection"])
    base.update(changes)
    return Scenario(**base).validate()


# Every effect at once: per-model loads under provider limits, capped tails with a
# retry, a phase's own latency, a correlated acceptance that decays and then holds,
# topk selection, parents from a front, repeated children, skips, a trainset of 3
# chunks (a 2x2 step's fourth task has the first's minibatch: when its two parents
# coincide, the pair is evaluated once), tokens and dollars, and a reflection
# shifted for its b.
EVERYTHING = make_scenario(
    workers=8,
    reflection_concurrency=3,
    trainset_size=8,
    loads=Loads(
        Load(servers=5, slowdown=0.2, run_spread=0.2), Load(servers=2, slowdown=0.4, run_spread=0.3)
    ),
    rollout=replace(lognormal(2.0, 1.0), cap=6.0, cap_retries=1),
    rollout_phases={"full_val": replace(lognormal(3.0, 0.5), cap=5.0)},
    acceptance=Acceptance(0.6, tau=20.0, decay_until=30.0, correlation=0.3),
    selection="topk:3",
    front_share=0.5,
    duplicate_children=0.3,
    skip_perfect=0.1,
    tokens=Tokens(
        lognormal(600.0), lognormal(200.0, 0.8), lognormal(400.0), 800.0, 200.0, 1, 0.005
    ),
    prices=Prices(task_input=0.5, task_output=2.0, reflection_input=1.0, reflection_output=4.0),
    rate_limits=RateLimits(
        task=RateLimit(rpm=100, tpm=80_000), reflection=RateLimit(rpm=12), burst_seconds=5
    ),
)


def max_concurrency(intervals: list[tuple[float, float]], tolerance: float = 1e-9) -> int:
    """The most intervals open at one instant.

    An interval ending at t frees its place before one starting at t; the
    tolerance absorbs float rounding (a start computed as a + b, an end as
    (x + a) + b).
    """
    points = [(start, 1) for start, _ in intervals] + [
        (end - tolerance, -1) for _, end in intervals
    ]
    points.sort(key=lambda p: (p[0], p[1]))  # ends (-1) sort before starts at the same time
    open_now = most = 0
    for _, step in points:
        open_now += step
        most = max(most, open_now)
    return most


def searched(quality: dict[str, Any] | None = None, **changes: Any) -> Scenario:
    """make_scenario with the quality model deciding the search (seed scoring 0.4)."""
    from pxn.quality import Quality

    model = Quality(**({"seed_score": 0.4} | (quality or {})))
    return make_scenario(acceptance=None, quality=model, **changes)
