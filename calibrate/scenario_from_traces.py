"""Traces -> a calibrated Scenario, with every fit behind it.

The run's setup (budget, data sizes, W, minibatch, reflection slots, the
selection strategy) is read from the traces' run_start; latencies,
acceptance, gepa's skipping of perfect parents and the engine overhead are
fitted. The Scenario keeps one rollout distribution for all phases, as the
simulator does; per-phase fits are reported, with a warning when the phases
differ. A local LM pool's size (lm_servers) comes from the traces' run_start
meta or the caller; its load slowdown is fitted (slowdown.py), and the latency
fits then see each call's latency as if served alone. When the calls report
token counts, the [tokens] table is fitted (tokens.py); with a model name
given, the [prices] table is priced from litellm's table (costs.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.stats

from pxn.calibrate.acceptance import AcceptanceFit, fit_acceptance, proposal_outcomes
from pxn.calibrate.costs import RecordedCosts, lookup_prices, recorded_costs
from pxn.calibrate.fit import LatencyFit, fit_latency
from pxn.calibrate.load_effect import LoadEffect, call_loads, fit_load_effects
from pxn.calibrate.overhead import ConcurrencyFit, OverheadFit, fit_concurrency, fit_overhead
from pxn.calibrate.slowdown import SlowdownFit, fit_slowdown
from pxn.calibrate.tokens import (
    TokenCounts,
    TokenFit,
    fit_token_counts,
    fit_tokens,
    missing_token_counts,
)
from pxn.errors import PxnError
from pxn.load import Loads
from pxn.scenario import Scenario
from pxn.selection import Selection
from pxn.shape import Shape
from pxn.tokens import Tokens
from pxn.trace import ROLLOUT_PHASES, Iteration, Loaded, Reflection, Rollout, Trace, load_traces

SETUP_FIELDS = (
    "budget",
    "valset_size",
    "trainset_size",
    "minibatch",
    "workers",
    "reflection_concurrency",
)
PHASE_TEST_MIN = 5  # points a phase needs to enter the test of phases differing
PHASE_ALPHA = 0.01


@dataclass(frozen=True)
class SkipFit:
    """gepa skips a task whose parent scored perfectly on its minibatch: how often."""

    tasks: int  # k per completed iteration, summed
    reflected: int  # reflections made in those iterations
    probability: float


@dataclass
class Calibration:
    loaded: Loaded
    scenario: Scenario
    rollout: LatencyFit
    rollout_by_phase: dict[str, LatencyFit]
    phase_pvalue: float  # Kruskal-Wallis across phases; nan when fewer than two phases
    reflection: LatencyFit
    tokens: list[TokenFit]  # latency against tokens out (reported only)
    token_counts: TokenCounts | None  # the [tokens] table's fits; None without token counts
    tokens_missing: list[str]  # the counts no call reports, e.g. "reflection tokens_in"
    costs: RecordedCosts
    acceptance: AcceptanceFit
    skip: SkipFit
    overhead: OverheadFit
    concurrency: ConcurrencyFit
    load_effects: list[LoadEffect]
    slowdown: SlowdownFit
    lm_servers_source: str  # where lm_servers came from ("" when unknown)
    notes: list[str] = field(default_factory=list)

    @property
    def traces(self) -> list[Trace]:
        return self.loaded.traces


def calibrate_traces(
    paths: Sequence[str | Path],
    *,
    name: str = "calibrated",
    latency: str = "auto",
    lm_servers: int | None = None,
    task_model: str | None = None,
    reflection_model: str | None = None,
) -> Calibration:
    """Read the traces and fit everything the Scenario needs.

    `lm_servers`: the LM pool's size when the traces do not say (it overrides them).
    `task_model`, `reflection_model`: model names litellm prices, for [prices].
    """
    prices = lookup_prices(task_model, reflection_model)  # an unknown name fails before the fits
    loaded = load_traces(paths)
    traces = loaded.traces
    notes = _setup_notes(traces)
    lm_servers, lm_source = _lm_servers(traces, lm_servers, notes)

    rollouts = [r for t in traces for r in t.of(Rollout)]
    reflections = [r for t in traces for r in t.of(Reflection)]
    if not reflections:
        raise PxnError(
            "no reflection events in the traces: the reflection latency cannot be "
            "calibrated; run until at least one iteration completes"
        )
    missing_tokens = missing_token_counts(rollouts, reflections)
    if prices is not None and missing_tokens:
        raise PxnError(
            f"prices tokens, but no call in the traces reports its "
            f"{', '.join(missing_tokens)}; calibrate without it, or from traces with token counts",
            subject="task model",
        )
    slowdown, served_alone = _fit_slowdown(traces, lm_servers, notes)
    rollout_latencies = served_alone(rollouts)
    rollout = fit_latency("rollout", [d for _, d in rollout_latencies], latency)
    by_phase = {
        phase: fit_latency(f"rollout {phase}", durations, "auto")
        for phase in ROLLOUT_PHASES
        if (durations := [d for r, d in rollout_latencies if r.phase == phase])
    }
    phase_pvalue = _phase_test(by_phase)
    if phase_pvalue < PHASE_ALPHA:
        medians = ", ".join(f"{p} {f.median:.3g} s" for p, f in by_phase.items())
        notes.append(
            f"rollout latency differs by phase (Kruskal-Wallis p={phase_pvalue:.2g}; medians "
            f"{medians}); the Scenario uses one distribution pooled over phases"
        )
    reflection_latencies = served_alone(reflections)
    # Without token counts the report says so (calibration_lines); not a warning.
    token_counts = None
    if not missing_tokens:
        token_counts = fit_token_counts(traces, reflection_latencies)
        _token_notes(token_counts, first_b=traces[0].run_start.minibatch, notes=notes)
        reflection_latencies = at_measured_minibatch(
            traces, reflection_latencies, token_counts.chosen
        )
    reflection = fit_latency("reflection", [d for _, d in reflection_latencies], latency)
    tokens = [
        fit
        for what, events in (("rollout", rollouts), ("reflection", reflections))
        if (fit := fit_tokens(what, events)) is not None
    ]
    costs = recorded_costs(rollouts, reflections, prices)
    if costs.dollars > 0 and prices is None:
        notes.append(
            f"the traces record ${costs.dollars:.4g} of cost over {costs.calls} calls, but not "
            "which model to price with: no [prices] table (give --task-model, and "
            "--reflection-model when it differs, to write one)"
        )
    acceptance = fit_acceptance([proposal_outcomes(t) for t in traces])
    skip = _fit_skip(traces)
    overhead = fit_overhead(traces)
    concurrency = fit_concurrency(traces)
    load_effects = fit_load_effects(traces)
    for effect in load_effects:
        if effect.significant:
            notes.append(
                f"{effect.what}s slow down under load (Spearman {effect.spearman:.2f} between "
                f"latency and LM calls in flight, +{effect.slope:.3g} s per extra call)"
                + (
                    "; on a local pool give --lm-servers K: the simulator then queues calls "
                    "beyond K and the slowdown is fitted apart from the queueing"
                    if lm_servers is None
                    else "; see the load slowdown fitted below"
                )
            )
    for trace in traces:
        end = trace.run_end
        if end is None or end.status != "completed":
            status = "no run_end" if end is None else end.status
            notes.append(f"{trace.path}: run did not complete ({status}); its events still count")

    first = traces[0].run_start
    scenario = Scenario(
        name=name,
        description=f"calibrated by pxn calibrate from {len(traces)} trace(s)",
        budget=first.budget,
        valset_size=first.valset_size,
        trainset_size=first.trainset_size,
        minibatch=first.minibatch,
        workers=first.workers,
        reflection_concurrency=first.reflection_concurrency,
        rollout=rollout.chosen,
        reflection=reflection.chosen,
        acceptance=acceptance.chosen,
        stage_overhead=overhead.per_stage,
        skip_perfect=skip.probability,
        selection=Selection.parse(_selection(traces[0])),
        loads=Loads.shared_pool(lm_servers, slowdown.chosen),
        tokens=None if token_counts is None else token_counts.chosen,
        prices=prices,
    )
    try:
        scenario.validate()
    except PxnError as exc:
        raise PxnError(f"the traces give an invalid scenario: {exc}") from None
    return Calibration(
        loaded=loaded,
        scenario=scenario,
        rollout=rollout,
        rollout_by_phase=by_phase,
        phase_pvalue=phase_pvalue,
        reflection=reflection,
        tokens=tokens,
        token_counts=token_counts,
        tokens_missing=missing_tokens,
        costs=costs,
        acceptance=acceptance,
        skip=skip,
        overhead=overhead,
        concurrency=concurrency,
        load_effects=load_effects,
        slowdown=slowdown,
        lm_servers_source=lm_source,
        notes=notes,
    )


def at_measured_minibatch(
    traces: list[Trace], latencies: list[tuple[Reflection, float]], tokens: Tokens
) -> list[tuple[Reflection, float]]:
    """Each reflection's latency as if read at the measured b (runs at other b shifted).

    A reflection at a larger b reads more records and takes longer; pooling
    them unshifted would fit a distribution of no single b. The shift is the
    one the simulator applies the other way (Tokens.reflection_latency_shift).
    """
    b_of = {id(r): t.run_start.minibatch for t in traces for r in t.of(Reflection)}
    return [
        (r, max(0.0, seconds - tokens.reflection_latency_shift(b_of[id(r)])))
        for r, seconds in latencies
    ]


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


def _lm_servers(traces: list[Trace], given: int | None, notes: list[str]) -> tuple[int | None, str]:
    """The LM pool's size: as given, else as the traces' run_start meta declares it."""
    declared_by = {
        t.path: t.run_start.meta["lm_servers"] for t in traces if "lm_servers" in t.run_start.meta
    }
    for path, value in declared_by.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PxnError(
                f"{path}: run_start meta lm_servers is {value!r}, not a whole number >= 1"
            )
    declared = sorted(set(declared_by.values()))
    if given is not None:
        if given < 1:
            raise PxnError(f"must be >= 1: got {given}", subject="LM servers")
        if declared and declared != [given]:
            notes.append(f"the traces declare lm_servers {declared}; {given} as given overrides it")
        return given, "as given"
    if not declared:
        return None, ""
    if len(declared) > 1:
        notes.append(f"traces differ in lm_servers ({declared}); the scenario takes the smallest")
    return declared[0], "from the traces' run_start"


def _fit_slowdown(traces: list[Trace], lm_servers: int | None, notes: list[str]):
    """Fit beta; and a function giving the calls' latencies as if each were served alone.

    That function leaves out calls that may have waited for a server (unless a
    kind would be left with none) and divides the others by the chosen slowdown
    at their load: the latency the Scenario draws before the simulator stretches it.
    """
    load_of: dict[int, int] = {}
    for trace in traces:
        calls = trace.of(Rollout) + trace.of(Reflection)
        load_of |= dict(zip(map(id, calls), call_loads(calls).tolist(), strict=True))
    calls = [c for t in traces for c in t.of(Rollout) + t.of(Reflection)]
    fit = fit_slowdown(
        np.array(["rollout" if isinstance(c, Rollout) else "reflection" for c in calls]),
        np.array([load_of[id(c)] for c in calls]),
        np.array([c.duration for c in calls]),
        lm_servers,
    )
    if fit.set_aside:
        notes.append(
            f"{fit.set_aside} call(s) started with more than lm_servers={lm_servers} LM calls in "
            "flight: they may have waited for a server, so their latencies are left out of the "
            "latency and slowdown fits (the simulator adds the queueing itself)"
        )

    def served_alone(events: list) -> list[tuple]:
        kept = [e for e in events if lm_servers is None or load_of[id(e)] <= lm_servers]
        if not kept and events:  # every call of this kind may have queued
            kept = events
            notes.append(
                f"every {type(events[0]).__name__.lower()} may have waited for a server: its "
                "latency is fitted with the waits in (an overestimate)"
            )
        if fit.chosen == 0:
            return [(e, e.duration) for e in kept]
        factors = fit.factor(np.array([load_of[id(e)] for e in kept])).tolist()
        return [(e, e.duration / f) for e, f in zip(kept, factors, strict=True)]

    return fit, served_alone


def _setup_notes(traces: list[Trace]) -> list[str]:
    """Say so when the traces were not all run with the same setup."""
    notes = []
    first = traces[0].run_start
    for name in SETUP_FIELDS:
        values = sorted({getattr(t.run_start, name) for t in traces})
        if len(values) > 1:
            notes.append(
                f"traces differ in {name} ({', '.join(map(str, values))}); "
                f"the scenario takes {getattr(first, name)} from {traces[0].path}"
            )
    return notes


def _phase_test(by_phase: dict[str, LatencyFit]) -> float:
    groups = [f.samples for f in by_phase.values() if f.n >= PHASE_TEST_MIN]
    if len(groups) < 2:
        return math.nan
    try:
        return float(scipy.stats.kruskal(*groups).pvalue)
    except ValueError:  # every value identical
        return math.nan


def _fit_skip(traces: list[Trace]) -> SkipFit:
    """Tasks of completed iterations that never reached a reflection were skipped."""
    tasks = reflected = 0
    for trace in traces:
        k = Shape.parse(trace.run_start.shape).k
        done = {i.iteration for i in trace.of(Iteration)}
        tasks += k * len(done)
        reflected += sum(1 for r in trace.live(Reflection) if r.iteration in done)
    probability = 0.0 if tasks == 0 else max(0.0, 1 - reflected / tasks)
    return SkipFit(tasks, reflected, min(probability, 0.95))


def _selection(trace: Trace) -> str:
    meta = trace.run_start.meta
    selection = meta.get("selection") or meta.get("scenario", {}).get("selection") or "all"
    return str(selection)
