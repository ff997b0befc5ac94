"""Each call's latency as the simulator draws it: served alone, at the measured b.

The simulator draws, caps, shifts a reflection for b, scales a rollout by its
candidate's prompt length (pxn.prompt_lengths) and stretches by load; this undoes the
last three. Calls that may have waited for a server are left out, unless every call of
a kind would be: then on one server each is taken less its wait, on more with the wait
in (an overestimate the caller reports).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pxn.calibrate.traces.slowdown import ROLE_KIND
from pxn.calibrate.traces.units import Calls
from pxn.tokens import Tokens


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
