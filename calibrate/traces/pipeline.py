"""Traces -> a calibrated Scenario, with every fit behind it and its uncertainty.

The evidence is gathered once (evidence.py: the traces, their setup as run_start declares
it, their units), with every run's W known where untimed adapter calls need it
(makespan.py). Then the parts are fitted in the order each needs the ones before
(fit_parts; parts.py, and a module per part): each model's load slowdown first, since the
latencies are fitted to the calls as the simulator draws them, served alone (slowdown.py) at
their candidates' prompt lengths; then the latencies, tokens, run spreads, prefix cache,
costs, the search's parts, the overhead and the bookkeeping. The Scenario is assembled and
checked; with `draws`, its [uncertainty] table holds a bootstrap of the same fits
(draws.py); with scores, the quality model can decide acceptance (quality.py).
[calibrated_on] records the longest run's metric calls and proposals, so a prediction for
a longer run can say how far it extrapolates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pxn.calibrate.summaries.abc_smc import Generation
from pxn.calibrate.traces import parts
from pxn.calibrate.traces.acceptance import AcceptanceFit
from pxn.calibrate.traces.bookkeeping import (
    DuplicateFit,
    FrontFit,
    MergeFit,
    SkipFit,
    fit_duplicates,
    fit_front_share,
    fit_merges,
    fit_skip,
)
from pxn.calibrate.traces.draws import DrawsFit, parameter_draws
from pxn.calibrate.traces.evidence import (
    Evidence,
    budget_of,
    calibrated_on,
    gather_evidence,
    note_incomplete_runs,
    optimizer_of,
    worker_split,
)
from pxn.calibrate.traces.failures import FailuresFit, fit_failures
from pxn.calibrate.traces.fit import LatencyFit
from pxn.calibrate.traces.makespan import UntimedFit
from pxn.calibrate.traces.overhead import (
    ConcurrencyFit,
    LoadEffect,
    OverheadFit,
    fit_concurrency,
    fit_overhead,
)
from pxn.calibrate.traces.phases import PhaseFits, fit_phases
from pxn.calibrate.traces.prefix_cache import PrefixCacheFit, fit_prefix_cache
from pxn.calibrate.traces.prompt_lengths import PromptFit, fit_prompt_lengths
from pxn.calibrate.traces.quality import QualityFit, fit_quality, scored
from pxn.calibrate.traces.run_spread import RunSpreadFit, fit_run_spread
from pxn.calibrate.traces.slowdown import ROLE_KIND, ModelSlowdown, served_alone
from pxn.calibrate.traces.tokens import RecordedCosts, TokenCounts, TokenFit, lookup_prices
from pxn.calibrate.traces.units import Units, selection_of
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.load import Load, Loads
from pxn.prices import Prices
from pxn.scenario import Scenario, Uncertainty
from pxn.sim.backends import Backend
from pxn.trace_reading import Loaded, Trace

SEARCH_MODELS = ("auto", "quality", "rates")


@dataclass
class Calibration:
    loaded: Loaded
    units: Units
    rollout: LatencyFit
    rollout_by_phase: dict[str, LatencyFit]
    rollout_phases: dict[str, Distribution]  # [rollout.phases]: phases with a latency of their own
    prompt: PromptFit  # how a candidate's prompt length scales its rollouts ([prompt])
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
    merges: MergeFit
    failures: FailuresFit
    draws: DrawsFit | None = None  # the [uncertainty] table's bootstrap; None without draws
    quality: QualityFit | None = None  # the search's quality model, when it decides acceptance
    untimed: UntimedFit | None = None  # the spans of calls that timed no rollout, when any
    # Why the traces' scores gave no quality model, when they held scores and it was tried.
    quality_refused: str | None = None
    notes: list[str] = field(default_factory=list)
    scenario: Scenario = field(init=False)  # assembled from the parts once they are fitted

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
    workers: int | None = None,
    search: str = "auto",
    jobs: int = 1,
    on_generation: Callable[[Generation], None] | None = None,
    backend: Backend | None = None,
) -> Calibration:
    """Read the traces and fit everything the Scenario needs.

    `lm_servers`: the LM pool's size when the traces do not say (it overrides them).
    `workers`: W of the runs whose recording did not declare it (makespan.py).
    `task_model`, `reflection_model`: model names litellm prices, for [prices].
    `draws`: parameter draws for the [uncertainty] table (0: none).
    `prefix_cache`: whether the reflections' servers keep their last prompt (None: known for
    pxn's own pool, else no).
    `search`: how proposals fare in the scenario: "quality" (the quality model, inferred
    from the traces' scores on `backend`, else on `jobs` local processes), "rates"
    (acceptance rates), or "auto" (the quality model when the traces hold scores).
    """
    prices = lookup_prices(task_model, reflection_model)  # an unknown name fails before the fits
    if draws < 0:
        raise PxnError(f"must be >= 0: got {draws}", subject="draws")
    if search not in SEARCH_MODELS:
        raise PxnError(f"is {', '.join(SEARCH_MODELS)}: got {search!r}", subject="search model")
    evidence = parts.with_workers(
        gather_evidence(paths, lm_servers, priced=prices is not None), workers
    )
    calibration = fit_parts(evidence, latency, prefix_cache, prices)
    calibration.scenario = assembled_scenario(calibration, evidence, name, prices)
    if draws:
        calibration.draws = parameter_draws(calibration, draws)
        calibration.scenario = calibration.scenario.replace(
            uncertainty=calibration.draws.uncertainty
        )
    if search == "quality" or (search == "auto" and scored(calibration.traces)):
        fit_search_model(calibration, search, draws, jobs, on_generation, backend)
    calibration.scenario.validate_draws()
    return calibration


def fit_parts(
    evidence: Evidence, latency: str, prefix_cache: bool | None, prices: Prices | None
) -> Calibration:
    """Every part fitted to the evidence, in the order each needs the ones before: the
    slowdowns, the calls served alone at them, the latencies, tokens, run spreads and prefix
    cache, then the search's parts, the overhead and the bookkeeping."""
    units, traces, servers = evidence.units, evidence.traces, evidence.lm_servers
    slowdowns = parts.slowdowns(evidence)
    betas = {role: fit.chosen for role, fit in slowdowns.items()}
    # How a candidate's prompt length scales its rollouts, from the calls at the slowdowns.
    prompt = fit_prompt_lengths(traces, served_alone(units.calls, betas, servers, None)[0])
    factors = prompt.factors(units.calls)
    served = parts.served(evidence, betas, factors)
    rollout, untimed = parts.rollout_latency(evidence, served, latency, betas)
    # Each phase's own latency where the phases differ; one for all with untimed calls.
    phases = (
        fit_phases(served, rollout, latency, evidence.notes)
        if untimed is None
        else PhaseFits({}, math.nan, {})
    )
    token_counts = parts.token_counts(evidence, served)
    # The calls as the simulator draws them, reflections shifted to the measured b.
    tokens = None if token_counts is None else token_counts.chosen
    at_measured_b, _ = served_alone(units.calls, betas, servers, tokens, factors)
    # The keywords are evaluated in order: each fit's notes follow those of the fits before.
    calibration = Calibration(
        loaded=evidence.loaded,
        units=units,
        rollout=rollout,
        rollout_by_phase=phases.by_phase,
        rollout_phases=phases.own,
        prompt=prompt,
        phase_pvalue=phases.pvalue,
        reflection=parts.latency_fit(evidence, at_measured_b, "reflection", latency),
        run_spreads={role: fit_run_spread(at_measured_b, units.design, role) for role in ROLE_KIND},
        prefix_cache=fit_prefix_cache(
            traces,
            None if token_counts is None else token_counts.latency,
            servers,
            prefix_cache,
        ),
        tokens=parts.latency_on_tokens_out(evidence),
        token_counts=token_counts,
        tokens_missing=evidence.tokens_missing,
        costs=parts.costs(evidence, prices),
        acceptance=parts.acceptance(evidence),
        skip=fit_skip(units.tasks, units.unskipped),
        failures=fit_failures(traces, units.losses),
        overhead=fit_overhead(traces),
        concurrency=fit_concurrency(traces),
        load_effects=parts.load_effects(evidence),
        slowdowns=slowdowns,
        lm_servers_source=evidence.lm_servers_source,
        front=fit_front_share(units.parents),
        duplicates=fit_duplicates(
            int(units.later.sum()),
            int(units.dropped.sum()),
            units.duplicates_shown,
            units.duplicates_why_not,
        ),
        merges=fit_merges(traces, units.merges, units.merges_accepted, evidence.notes),
        notes=evidence.notes,
        untimed=untimed,
    )
    note_incomplete_runs(traces, evidence.notes)
    return calibration


def assembled_scenario(
    cal: Calibration, evidence: Evidence, name: str, prices: Prices | None
) -> Scenario:
    """The Scenario the fitted parts make, at the runs' setup, checked."""
    traces, first = cal.traces, cal.traces[0].run_start
    betas = {role: fit.chosen for role, fit in cal.slowdowns.items()}
    spreads = cal.run_spreads
    scenario = Scenario(
        name=name,
        description=f"calibrated by pxn calibrate from {len(traces)} trace(s)",
        budget=budget_of(traces, evidence.notes),
        valset_size=first.valset_size,
        trainset_size=first.trainset_size,
        minibatch=first.minibatch,
        workers=first.workers,
        worker_split=worker_split(traces, evidence.notes),
        reflection_concurrency=first.reflection_concurrency,
        rollout=cal.rollout.chosen,
        rollout_phases=cal.rollout_phases,
        prompt=cal.prompt.chosen,
        reflection=cal.reflection.chosen,
        acceptance=cal.acceptance.chosen,
        stage_overhead=cal.overhead.per_stage,
        skip_perfect=cal.skip.probability,
        failures=cal.failures.failures,
        optimizer=optimizer_of(traces),
        selection=selection_of(traces[0]),
        front_share=cal.front.chosen,
        duplicate_children=cal.duplicates.chosen,
        **cal.merges.scenario_fields(),
        loads=Loads(
            Load(evidence.lm_servers, betas.get("task", 0.0), run_spread=spreads["task"].chosen),
            Load(
                evidence.lm_servers,
                betas.get("reflection", 0.0),
                cal.prefix_cache.seconds,
                run_spread=spreads["reflection"].chosen,
            ),
        ),
        tokens=None if cal.token_counts is None else cal.token_counts.chosen,
        prices=prices,
        calibrated_on=calibrated_on(traces),
    )
    try:
        return scenario.validate()
    except PxnError as exc:
        raise PxnError(f"the traces give an invalid scenario: {exc}") from None


def fit_search_model(
    calibration: Calibration,
    search: str,
    draws: int,
    jobs: int,
    on_generation: Callable[[Generation], None] | None,
    backend: Backend | None,
) -> None:
    """The quality model fitted to the traces' scores, in place of the acceptance rates; where
    it cannot be and `search` is "auto", the rates are kept and a note says why."""
    traces = calibration.traces
    if not scored(traces):
        raise PxnError(
            "the traces hold no validation scores and scored rollouts to fit the quality "
            "model to (a recording of gepa's own callbacks has them); calibrate with "
            "acceptance rates instead",
            subject="search model",
        )
    try:
        failures = calibration.failures.failures
        calibration.quality = fit_quality(traces, draws, failures, jobs, on_generation, backend)
    except PxnError as exc:
        if search == "quality":
            raise
        calibration.quality_refused = str(exc)
        calibration.notes.append(
            f"the quality model was not fitted ({exc}); the scenario keeps acceptance rates "
            "(--search quality makes this an error)"
        )
    else:
        calibration.scenario = with_quality(calibration.scenario, calibration.quality)


def with_quality(scenario: Scenario, fit: QualityFit) -> Scenario:
    """The scenario with the quality model deciding acceptance: its acceptance rates (a
    merge's too) and their draws give way to the [quality] table and its posterior's
    draws."""

    def by_rates(path: str) -> bool:
        return path.startswith("acceptance.") or path == "merge_acceptance"

    uncertainty = scenario.uncertainty
    if uncertainty is not None:
        draws = tuple(
            {p: v for p, v in draw.items() if not by_rates(p)} | fit.draws[i % len(fit.draws)]
            for i, draw in enumerate(uncertainty.draws)
        )
        uncertainty = Uncertainty(
            f"{uncertainty.source}; the [quality] table's from its ABC posterior", draws
        )
    return scenario.replace(
        acceptance=None, merge_acceptance=None, quality=fit.quality, uncertainty=uncertainty
    )
