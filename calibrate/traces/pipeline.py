"""Traces -> a calibrated Scenario, with every fit behind it and its uncertainty.

The run's setup (budget, data sizes, W, minibatch, reflection slots, the
selection strategy) is read from the traces' run_start; everything else is
fitted from the traces cut into units (units.py): each model's load slowdown
(slowdown.py; a local LM pool's size, lm_servers, comes from the traces'
run_start meta or the caller), the latencies as served alone (served.py), with
a cap where they pile up at one (tails.py), each rollout phase's own latency
when the phases differ, acceptance with its decay and within-step correlation
(acceptance.py), gepa's recurring parents and duplicate children
(bookkeeping.py), the skipping of perfect parents and the engine overhead.
When the calls report token counts, the [tokens] table is fitted (tokens.py);
with a model name given, the [prices] table is priced from litellm's table
(costs.py). How much whole runs differ in speed, each model's run_spread,
comes from runs of one setup (run_spread.py). With `draws`, the
[uncertainty] table holds parameter draws from a bootstrap of the same fits
(draws.py). [calibrated_on] records the longest
run's metric calls and proposals, so a prediction for a longer run can say
how far it extrapolates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.stats

from pxn.calibrate.traces.acceptance import AcceptanceFit, fit_acceptance
from pxn.calibrate.traces.bookkeeping import DuplicateFit, FrontFit, fit_duplicates, fit_front_share
from pxn.calibrate.traces.costs import RecordedCosts, lookup_prices, recorded_costs
from pxn.calibrate.traces.draws import DrawsFit, parameter_draws
from pxn.calibrate.traces.fit import LatencyFit, fit_latency
from pxn.calibrate.traces.load_effect import LoadEffect, fit_load_effects
from pxn.calibrate.traces.overhead import ConcurrencyFit, OverheadFit, fit_concurrency, fit_overhead
from pxn.calibrate.traces.prefix_cache import PrefixCacheFit, fit_prefix_cache
from pxn.calibrate.traces.run_spread import RunSpreadFit, fit_run_spread
from pxn.calibrate.traces.served import latency_sample, served_alone
from pxn.calibrate.traces.slowdown import ROLE_KIND, ModelSlowdown, fit_model_slowdowns
from pxn.calibrate.traces.tokens import (
    TokenCounts,
    TokenFit,
    fit_token_counts,
    fit_tokens,
    missing_token_counts,
)
from pxn.calibrate.traces.units import Calls, Units, cut_into_units, selection_of, skip_share
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.load import Load, Loads
from pxn.scenario import CalibratedOn, Scenario
from pxn.trace import (
    ROLLOUT_PHASES,
    Loaded,
    Reflection,
    Rollout,
    Trace,
    load_traces,
    summarize,
)

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
PHASE_OWN_MIN = 30  # points a phase needs for its own latency in the Scenario


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
    units: Units
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
    slowdowns: dict[str, ModelSlowdown]  # per model: "task", "reflection"
    run_spreads: dict[str, RunSpreadFit]  # per model: how much whole runs differ in speed
    prefix_cache: PrefixCacheFit
    lm_servers_source: str  # where lm_servers came from ("" when unknown)
    front: FrontFit
    duplicates: DuplicateFit
    draws: DrawsFit | None = None  # the [uncertainty] table's bootstrap; None without draws
    notes: list[str] = field(default_factory=list)

    @property
    def traces(self) -> list[Trace]:
        return self.loaded.traces

    @property
    def servers(self) -> int | None:
        return self.scenario.loads.task.servers


def calibrate_traces(
    paths: Sequence[str | Path],
    *,
    name: str = "calibrated",
    latency: str = "auto",
    lm_servers: int | None = None,
    task_model: str | None = None,
    reflection_model: str | None = None,
    draws: int = 0,
    prefix_cache: bool | None = None,
) -> Calibration:
    """Read the traces and fit everything the Scenario needs.

    `lm_servers`: the LM pool's size when the traces do not say (it overrides them).
    `task_model`, `reflection_model`: model names litellm prices, for [prices].
    `draws`: parameter draws for the [uncertainty] table (0: none).
    `prefix_cache`: whether the reflections' servers keep their last prompt (None: known for
    pxn's own pool, else no).
    """
    prices = lookup_prices(task_model, reflection_model)  # an unknown name fails before the fits
    if draws < 0:
        raise PxnError(f"must be >= 0: got {draws}", subject="draws")
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
    units = cut_into_units(traces)
    slowdowns = _fit_slowdowns(units.calls, lm_servers, notes)
    betas = {role: fit.chosen for role, fit in slowdowns.items()}
    served, waited = served_alone(units.calls, betas, lm_servers, None)
    for kind in waited:
        notes.append(
            f"every {kind} may have waited for a server: its latency is fitted with the waits "
            "in (an overestimate)"
        )
    rollout = _fit_kind(served, units, "rollout", latency)
    by_phase = _fit_phases(served, rollout, latency)
    phase_pvalue = phase_test([f.samples for f in by_phase.values()])
    rollout_phases = _own_phases(by_phase, phase_pvalue, notes)
    # Without token counts the report says so (calibration_lines); not a warning.
    token_counts = None
    if not missing_tokens:
        observed = served.of("reflection") & ~served.censored
        pairs = list(zip(served.event[observed], served.latency[observed].tolist(), strict=True))
        token_counts = fit_token_counts(traces, pairs)
        _token_notes(token_counts, first_b=traces[0].run_start.minibatch, notes=notes)
        served, _ = served_alone(units.calls, betas, lm_servers, token_counts.chosen)
    reflection = _fit_kind(served, units, "reflection", latency)
    run_spreads = {role: fit_run_spread(served, units.design, role) for role in ROLE_KIND}
    prefix = fit_prefix_cache(
        traces, None if token_counts is None else token_counts.latency, lm_servers, prefix_cache
    )
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
    acceptance = fit_acceptance(units.steps)
    if units.passes_hidden:
        notes.append(
            "a run with a selection limit records no minibatch scores: acceptance counts the "
            "children gepa kept, fewer than passed their judge when the limit dropped some"
        )
    skip = SkipFit(
        int(units.tasks.sum()),
        int(units.reflected.sum()),
        skip_share(units.tasks.sum(), units.reflected.sum()),
    )
    overhead = fit_overhead(traces)
    concurrency = fit_concurrency(traces)
    load_effects = fit_load_effects(traces)
    for effect in load_effects:
        if effect.significant:
            notes.append(
                f"{effect.what}s slow down under load (Spearman {effect.spearman:.2f} between "
                f"latency and calls in flight, +{effect.slope:.3g} s per extra call); "
                "see the load slowdown fitted below"
            )
    front = fit_front_share(units.parents)
    duplicates = fit_duplicates(
        int(units.later.sum()),
        int(units.dropped.sum()),
        units.duplicates_shown,
        units.duplicates_why_not,
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
        worker_split=_worker_split(traces, notes),
        reflection_concurrency=first.reflection_concurrency,
        rollout=rollout.chosen,
        rollout_phases=rollout_phases,
        reflection=reflection.chosen,
        acceptance=acceptance.chosen,
        stage_overhead=overhead.per_stage,
        skip_perfect=skip.probability,
        selection=selection_of(traces[0]),
        front_share=front.chosen,
        duplicate_children=duplicates.chosen,
        loads=Loads(
            Load(lm_servers, betas.get("task", 0.0), run_spread=run_spreads["task"].chosen),
            Load(
                lm_servers,
                betas.get("reflection", 0.0),
                prefix.seconds,
                run_spread=run_spreads["reflection"].chosen,
            ),
        ),
        tokens=None if token_counts is None else token_counts.chosen,
        prices=prices,
        calibrated_on=_calibrated_on(traces),
    )
    try:
        scenario.validate()
    except PxnError as exc:
        raise PxnError(f"the traces give an invalid scenario: {exc}") from None
    calibration = Calibration(
        loaded=loaded,
        scenario=scenario,
        units=units,
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
        slowdowns=slowdowns,
        run_spreads=run_spreads,
        prefix_cache=prefix,
        lm_servers_source=lm_source,
        front=front,
        duplicates=duplicates,
        notes=notes,
    )
    if draws:
        calibration.draws = parameter_draws(calibration, draws)
        calibration.scenario = scenario.replace(uncertainty=calibration.draws.uncertainty)
        calibration.scenario.validate_draws()
    return calibration


def _calibrated_on(traces: list[Trace]) -> CalibratedOn:
    """The longest run's metric calls and proposals: how far the traces reach."""
    runs = [summarize(t) for t in traces]
    return CalibratedOn(
        runs=len(runs),
        metric_calls=max(r.metric_calls for r in runs),
        proposals=max(r.proposals for r in runs),
    )


def _fit_kind(served: Calls, units: Units, kind: str, choice: str) -> LatencyFit:
    observed, timed_out = latency_sample(served, kind)
    return fit_latency(
        kind, observed, choice, timed_out=timed_out, retries=units.retries.get(kind, ())
    )


def _fit_phases(served: Calls, pooled: LatencyFit, choice: str) -> dict[str, LatencyFit]:
    """Each phase's own fit (its own family), with the pooled sample's cap if it has one.

    The pooled sample mixes the phases, so its family need not be any phase's. A
    phase too small to give its own latency is fitted by "auto", for the report.
    """
    fits = {}
    for phase in ROLLOUT_PHASES:
        observed, timed_out = latency_sample(served, "rollout", phase)
        if len(observed):
            fits[phase] = fit_latency(
                f"rollout {phase}",
                observed,
                choice if len(observed) >= PHASE_OWN_MIN else "auto",
                timed_out=timed_out,
                tail=pooled.tail,
            )
    return fits


def _own_phases(
    by_phase: dict[str, LatencyFit], pvalue: float, notes: list[str]
) -> dict[str, Distribution]:
    """The phases that get their own latency: when phases differ, those with data enough."""
    if not pvalue < PHASE_ALPHA:
        return {}
    own = {p: f.chosen for p, f in by_phase.items() if f.n >= PHASE_OWN_MIN}
    medians = ", ".join(f"{p} {f.median:.3g} s" for p, f in by_phase.items())
    kept = ", ".join(own) if own else "none"
    notes.append(
        f"rollout latency differs by phase (Kruskal-Wallis p={pvalue:.2g}; medians {medians}): "
        f"phases with their own latency in [rollout.phases]: {kept} (at least "
        f"{PHASE_OWN_MIN} rollouts each); [rollout] stays the fit pooled over phases"
    )
    return own


def _fit_slowdowns(calls: Calls, servers: int | None, notes: list[str]):
    """Each model's slowdown from its calls that ran to the end (not timed out)."""
    done = ~calls.censored
    fits = fit_model_slowdowns(
        calls.kind[done], calls.phase[done], calls.load[done], calls.latency[done], servers
    )
    queued = 0 if servers is None else int(np.sum(calls.load[done] > servers))
    if queued:
        notes.append(
            f"{queued} call(s) started with more than lm_servers={servers} calls of their model "
            "in flight: they may have waited for a server, so their latencies are left out of "
            "the latency and slowdown fits (the simulator adds the queueing itself)"
        )
    return fits


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


def _worker_split(traces: list[Trace], notes: list[str]) -> str:
    """How the runs' workers served a stage's candidates: dspy.GEPA's adapter splits its
    num_threads among them (its recording says dspy in run_start meta); others pool them."""
    splits = ["per_candidate" if "dspy" in t.run_start.meta else "pooled" for t in traces]
    kinds = sorted(set(splits))
    if len(kinds) > 1:
        notes.append(
            f"traces differ in how their workers served candidates ({', '.join(kinds)}); "
            f"the scenario takes {splits[0]} from {traces[0].path}"
        )
    return splits[0]


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


def phase_test(samples: Sequence[Sequence[float]]) -> float:
    """Kruskal-Wallis p-value of the phases' latencies differing, over the phases with at
    least PHASE_TEST_MIN of them (its false-positive rate there is measured in the tests);
    nan when fewer than two phases have as many."""
    groups = [g for g in samples if len(g) >= PHASE_TEST_MIN]
    if len(groups) < 2:
        return math.nan
    try:
        return float(scipy.stats.kruskal(*groups).pvalue)
    except ValueError:  # every value identical
        return math.nan
