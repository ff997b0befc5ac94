"""The fitted parts of a calibration from traces: each function reads the evidence, returns
one part and adds that part's notes to the evidence's list. pipeline.py runs them in order.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pxn.calibrate.traces.acceptance import AcceptanceFit, fit_acceptance
from pxn.calibrate.traces.evidence import Evidence
from pxn.calibrate.traces.fit import LatencyFit, fit_latency
from pxn.calibrate.traces.makespan import UntimedFit, fit_untimed_latency, resolve_workers
from pxn.calibrate.traces.overhead import LoadEffect, fit_load_effects
from pxn.calibrate.traces.slowdown import (
    ROLE_KIND,
    ModelSlowdown,
    fit_model_slowdowns,
    latency_sample,
    served_alone,
)
from pxn.calibrate.traces.tokens import (
    RecordedCosts,
    TokenCounts,
    TokenFit,
    fit_token_counts,
    fit_tokens,
    recorded_costs,
)
from pxn.calibrate.traces.units import Calls, cut_into_units
from pxn.prices import Prices


def with_workers(evidence: Evidence, workers: int | None) -> Evidence:
    """The evidence with every run's W known where its untimed calls need it (makespan.py);
    `workers`: W for the runs whose recording declared none."""
    traces = resolve_workers(evidence.traces, workers)
    if all(a is b for a, b in zip(traces, evidence.traces, strict=True)):
        return evidence
    loaded = dataclasses.replace(evidence.loaded, traces=traces)
    return dataclasses.replace(evidence, loaded=loaded, units=cut_into_units(traces))


def slowdowns(evidence: Evidence) -> dict[str, ModelSlowdown]:
    """Each model's slowdown from its calls that ran to the end (not timed out)."""
    calls, servers = evidence.units.calls, evidence.lm_servers
    done = ~calls.censored
    fits = fit_model_slowdowns(
        calls.kind[done], calls.phase[done], calls.load[done], calls.latency[done], servers
    )
    queued = 0
    if servers is not None:  # a kind whose every call queued is fitted as `served` says
        for kind in ROLE_KIND.values():
            mine = done & (calls.kind == kind)
            if np.any(mine & (calls.load <= servers)):
                queued += int(np.sum(mine & (calls.load > servers)))
    if queued:
        evidence.notes.append(
            f"{queued} call(s) started with more than lm_servers={servers} calls of their model "
            "in flight: they may have waited for a server, so their latencies are left out of "
            "the latency and slowdown fits (the simulator adds the queueing itself)"
        )
    return fits


def served(evidence: Evidence, betas: dict[str, float], factors: np.ndarray | None) -> Calls:
    """The calls as the simulator draws them, each at its own run's b; `factors`: each call's
    prompt factor (PromptFit.factors)."""
    calls = evidence.units.calls
    calls, waited = served_alone(calls, betas, evidence.lm_servers, None, factors)
    for kind in waited:
        evidence.notes.append(
            f"every {kind} may have waited for the one server: its latency is fitted as the "
            "time the server spent on it, from the end of the call it served before"
            if evidence.lm_servers == 1
            else f"every {kind} may have waited for a server: its latency is fitted with the "
            "waits in (an overestimate)"
        )
    return calls


def rollout_latency(
    evidence: Evidence, served: Calls, choice: str, betas: dict[str, float]
) -> tuple[LatencyFit, UntimedFit | None]:
    """The rollout latency: from the timed rollouts, or with the untimed calls' spans when
    there are any (makespan.py)."""
    units = evidence.units
    if not len(units.spans):
        return latency_fit(evidence, served, "rollout", choice), None
    observed, timed_out = latency_sample(served, "rollout")
    return fit_untimed_latency(
        units.spans,
        units.spans_set_aside,
        observed,
        timed_out,
        servers=evidence.lm_servers,
        slowdown=betas.get("task", 0.0),
        choice=choice,
        notes=evidence.notes,
    )


def latency_fit(evidence: Evidence, served: Calls, kind: str, choice: str) -> LatencyFit:
    observed, timed_out = latency_sample(served, kind)
    retries = evidence.units.retries.get(kind, ())
    return fit_latency(kind, observed, choice, timed_out=timed_out, retries=retries)


def token_counts(evidence: Evidence, served: Calls) -> TokenCounts | None:
    """The [tokens] table's fits; None when some count is missing (the report says so)."""
    if evidence.tokens_missing:
        return None
    observed = served.of("reflection") & ~served.censored
    pairs = list(zip(served.event[observed], served.latency[observed].tolist(), strict=True))
    fit = fit_token_counts(evidence.traces, pairs)
    _token_notes(fit, evidence.traces[0].run_start.minibatch, evidence.notes)
    return fit


def _token_notes(fit: TokenCounts, first_b: int, notes: list[str]) -> None:
    r = fit.reflection_input
    if len(r.by_minibatch) > 1:
        counts = ", ".join(f"{n} at b={b}" for b, (n, _) in r.by_minibatch.items())
        notes.append(
            f"the traces mix b ({counts}); the b with the most reflections is taken as "
            "where the reflection latency was measured, and reflections at other b are "
            "shifted to it by the seconds-per-input-token fit: "
            f"[tokens] measured_minibatch={r.measured_minibatch}"
            + (
                f" (the scenario's b is {first_b}, the first trace's)"
                if first_b != r.measured_minibatch
                else ""
            )
        )
    if r.floored:
        notes.append(
            f"reflection input: base + per_example * b would need a negative base at "
            f"b={r.measured_minibatch}; base is held at 0 and per_example = the measured mean / b "
            f"= {r.per_example:.4g} tokens (b's effect on the input is then an upper bound)"
        )


def latency_on_tokens_out(evidence: Evidence) -> list[TokenFit]:
    """Each kind's latency against its tokens out (reported only); untimed rollouts have
    none of their own."""
    timed = [r for r in evidence.rollouts if r.timed]
    return [
        fit
        for what, events in (("rollout", timed), ("reflection", evidence.reflections))
        if (fit := fit_tokens(what, events)) is not None
    ]


def costs(evidence: Evidence, prices: Prices | None) -> RecordedCosts:
    recorded = recorded_costs(evidence.rollouts, evidence.reflections, prices)
    if recorded.dollars > 0 and prices is None:
        evidence.notes.append(
            f"the traces record ${recorded.dollars:.4g} of cost over {recorded.calls} calls, but "
            "not which model to price with: no [prices] table (give --task-model, and "
            "--reflection-model when it differs, to write one)"
        )
    return recorded


def acceptance(evidence: Evidence) -> AcceptanceFit:
    fit = fit_acceptance(evidence.units.steps)
    if evidence.units.passes_hidden:
        evidence.notes.append(
            "a run with a selection limit records no minibatch scores: acceptance counts the "
            "children gepa kept, fewer than passed their judge when the limit dropped some"
        )
    return fit


def load_effects(evidence: Evidence) -> list[LoadEffect]:
    effects = fit_load_effects(evidence.traces)
    for effect in effects:
        if effect.significant:
            evidence.notes.append(
                f"{effect.what}s slow down under load (Spearman {effect.spearman:.2f} between "
                f"latency and calls in flight, +{effect.slope:.3g} s per extra call); "
                "see the load slowdown fitted below"
            )
    return effects
