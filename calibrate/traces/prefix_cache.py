"""The reflection prefix cache: what a reflection saves when its server just served a sibling.

A caching server (llama.cpp) processes only the part of a prompt that differs from the
one it served last; siblings share the runner's recorded `prefix_tokens`. The saving is
the reflection's seconds per input token (tokens.py) times their mean, its interval the
slope's. Whether a server caches is known for pxn's own pool (its traces name
llama-cpp-python) and declared for any other (`--prefix-cache yes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pxn.calibrate.traces.slowdown import served_alone
from pxn.calibrate.traces.tokens import LatencyOnTokens, fit_latency_on_tokens
from pxn.trace import Reflection
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

# The server pxn's own pool runs; it reuses the longest prefix of its last prompt.
CACHING_SERVER = "llama-cpp-python"


@dataclass(frozen=True)
class PrefixCacheFit:
    caches: bool  # whether the servers are taken to keep their last prompt
    why: str  # ... and on what grounds
    prefix_tokens: float | None  # mean over the reflections that record it
    recorded: int  # reflections with a prefix_tokens
    seconds: float  # the chosen load.reflection.prefix_seconds
    interval: tuple[float, float] | None
    reason: str  # what was chosen, and why


def server_caches(traces: Sequence[Trace], declared: bool | None) -> tuple[bool, str]:
    """Whether the reflections' servers keep their last prompt: declared, or known."""
    if declared is not None:
        return declared, "declared (--prefix-cache)"
    if traces and all(CACHING_SERVER in t.run_start.meta for t in traces):
        return True, f"pxn's local pool ({CACHING_SERVER} reuses its last prompt's prefix)"
    return False, "not known to cache (declare it with --prefix-cache yes)"


def mean_prefix_tokens(reflections: Sequence[Reflection]) -> tuple[float | None, int]:
    recorded = [r.prefix_tokens for r in reflections if r.prefix_tokens is not None]
    return (float(np.mean(recorded)) if recorded else None), len(recorded)


def fit_prefix_cache(
    traces: Sequence[Trace],
    latency: LatencyOnTokens | None,
    servers: int | None,
    declared: bool | None,
) -> PrefixCacheFit:
    caches, why = server_caches(traces, declared)
    reflections = [r for t in traces for r in t.of(Reflection)]
    prefix, recorded = mean_prefix_tokens(reflections)

    def chosen(reason: str, seconds: float = 0.0, interval=None) -> PrefixCacheFit:
        return PrefixCacheFit(caches, why, prefix, recorded, seconds, interval, reason)

    if not caches:
        return chosen("the servers are not taken to cache prompts")
    if servers is None:
        return chosen("no lm_servers: a cache is a server's (pass --lm-servers K)")
    if prefix is None:
        return chosen("no reflection records prefix_tokens (traces from before pxn recorded it)")
    if latency is None or not latency.input_effect:
        return chosen("the reflection latency does not grow with its input tokens")
    low, high = (bound * prefix for bound in latency.per_input_ci)
    reason = "seconds per input token x mean prefix tokens"
    return chosen(reason, latency.per_input * prefix, (max(0.0, low), high))


def draw_prefix_seconds(resample: Resample) -> dict[str, float]:
    """The prefix cache's saving refitted to the resampled reflections, in the units of the
    point fit (served alone, before any shift for b); the point value when a draw cannot
    see the slope."""
    point = resample.scenario.loads.reflection.prefix_seconds
    if point <= 0:
        return {}
    served, _ = served_alone(
        resample.units.calls, resample.betas, resample.calibration.servers, None
    )
    rows = served.of("reflection") & ~served.censored
    pairs = list(zip(served.event[rows], served.latency[rows].tolist(), strict=True))
    latency, _ = fit_latency_on_tokens("reflection", pairs)
    prefix, _ = mean_prefix_tokens([e for e, _ in pairs])
    if latency is None or prefix is None or not latency.input_effect:
        return {"load.reflection.prefix_seconds": point}
    return {"load.reflection.prefix_seconds": latency.per_input * prefix}


def prefix_cache_line(cal: Calibration) -> str:
    fit = cal.prefix_cache
    tokens = (
        ""
        if fit.prefix_tokens is None
        else f"sibling reflections share {fit.prefix_tokens:.4g} prompt tokens on average "
        f"(n={fit.recorded}); "
    )
    interval = ""
    if fit.interval is not None:
        interval = f" [95% {fit.interval[0]:.3g}, {fit.interval[1]:.3g}]"
    return (
        f"reflection prefix cache: servers {'cache' if fit.caches else 'do not cache'} "
        f"prompts: {fit.why}; {tokens}{fit.reason} "
        f"-> load.reflection.prefix_seconds={fit.seconds:.4g}{interval}"
    )
