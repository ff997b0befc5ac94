"""Small scenarios and trace readers shared by the simulator tests."""

from __future__ import annotations

import math
from typing import Any

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.load import Loads
from pxn.scenario import Scenario
from pxn.selection import Selection


def fixed(seconds: float) -> Distribution:
    """A deterministic latency: an empirical distribution with one sample."""
    return Distribution("empirical", samples=(seconds,))


def lognormal(mean_seconds: float, sigma: float = 0.5) -> Distribution:
    """A lognormal latency with the given mean (scipy's s, scale parameters)."""

    return Distribution(
        "lognorm", params={"s": sigma, "scale": mean_seconds * math.exp(-(sigma**2) / 2)}
    )


def make_scenario(**changes: Any) -> Scenario:
    """A small, quick scenario; tests change the fields they are about.

    `lm_servers` and `load_slowdown` give one local LM pool serving both models.
    """
    pool = {key: changes.pop(key) for key in ("lm_servers", "load_slowdown") if key in changes}
    if pool:
        changes["loads"] = Loads.shared_pool(pool.get("lm_servers"), pool.get("load_slowdown", 0.0))
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
