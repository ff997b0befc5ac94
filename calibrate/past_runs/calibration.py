"""A scenario from a run already made, with no recorder: what was measured, inferred, assumed.

The run's directory becomes a trace of the one schema (to_trace.py), read back through
the one reader; the pipeline's duration-free fits (failures, skips, front_share,
duplicates, merges, acceptance) are called on it one by one, in the pipeline's order,
since its latency, load, token and overhead fits would fit the order-only clock. The
search's quality model and the latencies are inferred together from the run's figures
and its wall-clock (timing.py): facts of the kind run summaries give, read by the
summaries' inference. The split between rollouts and reflections is what the priors and
the run's structure leave it; the posterior's draws carry that.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pxn.calibrate.past_runs.gepa_log import GepaLog, parse_log, read_log_file
from pxn.calibrate.past_runs.mlflow_run import MlflowRun
from pxn.calibrate.past_runs.past_run import PastRun, past_run
from pxn.calibrate.past_runs.run_dir import GEPA_LOG, RunDirFiles, read_run_dir
from pxn.calibrate.past_runs.stage_times import (
    ReflectionLatency,
    StageLatency,
    coarse,
    fit_reflection_latency,
    fit_stage_latency,
    latency_priors,
    log_stage_spans,
    mlflow_stage_spans,
)
from pxn.calibrate.past_runs.timing import FileTimes, WallClock, file_times, run_wall_clock
from pxn.calibrate.past_runs.to_trace import past_run_events, write_past_run_trace
from pxn.calibrate.summaries.abc_smc import Generation
from pxn.calibrate.summaries.facts import Fact, InferenceOptions, Run, Setup, Summaries
from pxn.calibrate.summaries.infer import Inference, infer_from_summaries
from pxn.calibrate.summaries.priors import Prior
from pxn.calibrate.traces.acceptance import AcceptanceFit, fit_acceptance
from pxn.calibrate.traces.bookkeeping import MergeFit, fit_front_share, fit_merges, fit_skip
from pxn.calibrate.traces.draws import RUN_SPREAD_SEED
from pxn.calibrate.traces.failures import FailuresFit, fit_failures
from pxn.calibrate.traces.pipeline import SEARCH_MODELS
from pxn.calibrate.traces.quality import (
    FIXED_TIMES,
    default_options,
    seed_validation,
    trace_summaries,
)
from pxn.calibrate.traces.run_spread import PRIOR_SOURCE, with_prior_run_spreads
from pxn.calibrate.traces.units import Units, cut_into_units
from pxn.errors import PxnError
from pxn.failures import Failures
from pxn.prompt_lengths import PromptLengths
from pxn.run_summary import summarize
from pxn.scenario import Scenario, Uncertainty
from pxn.shape import Shape
from pxn.sim.backends import Backend
from pxn.trace_reading import Trace, load_traces

TRACE_FILE = "past-run.jsonl"


@dataclass(frozen=True)
class RunSetup:
    """What the run was given that its directory does not keep, and where each came from."""

    workers: int
    reflection_concurrency: int
    budget: int
    dspy: bool
    said: tuple[str, ...]  # a line per figure: its value and its source


@dataclass
class PastCalibration:
    run: PastRun
    trace: Trace
    setup: RunSetup
    wall_clock: WallClock
    file_times: FileTimes | None
    tracked: MlflowRun | None  # the MLflow run the times came from, when one was read
    stages: StageLatency | None  # the rollout latency the marked stages measured
    reflections: ReflectionLatency | None  # the reflection latency the marked spans timed
    inference: Inference
    scenario: Scenario
    acceptance: AcceptanceFit
    failures: FailuresFit
    merges: MergeFit
    search: str  # "quality" or "rates"
    notes: list[str] = field(default_factory=list)


def calibrate_past_run(
    path: str | Path,
    *,
    wall_clock: str | None = None,
    workers: int | None = None,
    reflection_concurrency: int | None = None,
    budget: int | None = None,
    shape: Shape | None = None,
    log: str | Path | None = None,
    tracked: MlflowRun | None = None,
    name: str = "calibrated",
    draws: int = 100,
    search: str = "auto",
    on_generation: Callable[[Generation], None] | None = None,
    backend: Backend | None = None,
) -> PastCalibration:
    """Calibrate from a run_dir (or log_dir) as gepa wrote it: `wall_clock` as the user writes
    it ("47min"), W, C, B and P x N where the run_dir cannot tell them, `log` DSPy's log lines
    kept in a file, `tracked` the MLflow run gepa logged it to."""
    if search not in SEARCH_MODELS:
        raise PxnError(f"is {', '.join(SEARCH_MODELS)}: got {search!r}", subject="search model")
    files = read_run_dir(path)
    the_log = _log(files, log)
    run = past_run(files, the_log, shape)
    setup = _setup(files, run, the_log, workers, reflection_concurrency, budget)
    notes = [*run.notes]
    times = file_times(files.path, files.log_lines)
    clock = run_wall_clock(run, times, wall_clock, tracked, the_log)
    scored = _scored(search, run)
    trace = _as_trace(run, setup)
    units = cut_into_units([trace])
    acceptance = fit_acceptance(units.steps)
    failures = fit_failures([trace], units.losses)
    merges = fit_merges([trace], units.merges, units.merges_accepted, notes)
    stages, reflections = _marked_stages(run, tracked, the_log, setup.workers)
    notes += [] if stages is None else list(stages.notes)
    summaries = past_run_summaries(
        trace,
        clock,
        scored=scored,
        failures=failures.failures,
        options=default_options(draws),
        priors=_latency_priors(stages, reflections),
        path=files.path,
        prompt=None if stages is None else stages.candidates.chosen,
    )
    inference = infer_from_summaries(summaries, name, on_generation=on_generation, backend=backend)
    scenario = inference.scenario.replace(
        name=name,
        description=f"calibrated by pxn calibrate from the past run {files.path}",
        **_bookkeeping_fields(units, failures, merges, setup, scored),
    )
    if scored:  # the seed's validation kept as measured, as for a recorded run
        assert scenario.quality is not None
        quality = dataclasses.replace(scenario.quality, seed_validation=seed_validation([trace]))
        scenario = scenario.replace(quality=quality)
    scenario = _with_run_spread_prior(scenario, notes)
    scenario.validate()
    scenario.validate_draws()
    return PastCalibration(
        run=run,
        trace=trace,
        setup=setup,
        wall_clock=clock,
        file_times=times,
        tracked=tracked,
        stages=stages,
        reflections=reflections,
        inference=inference,
        scenario=scenario,
        acceptance=acceptance,
        failures=failures,
        merges=merges,
        search="quality" if scored else "rates",
        notes=notes,
    )


def past_run_summaries(
    trace: Trace,
    wall_clock: WallClock,
    *,
    scored: bool,
    failures: Failures,
    options: InferenceOptions,
    priors: dict[str, Prior],
    path: Path,
    prompt: PromptLengths | None,
) -> Summaries:
    """The run's figures as facts of one run at its own setup and shape, its candidates'
    rollouts at `prompt`'s factors where the stages measured them."""
    summary = summarize(trace)
    if scored:
        base = trace_summaries([trace], options, failures)
        # Labelled by the run's directory, not the temporary one its trace was read from.
        temporary = trace.path.parent.name or trace.path.name
        runs = base.runs
        facts = [
            dataclasses.replace(f, label=f.label.removeprefix(f"{temporary} ")) for f in base.facts
        ]
        fixed = {p: v for p, v in base.priors.items() if p not in FIXED_TIMES}
    else:
        start = trace.run_start
        runs = (Run(Shape.parse(start.shape), Setup.of_trace(start)),)
        facts = [_count("accepted", summary.accepted)]
        fixed = {f"failures.{k}": v for k, v in failures.to_dict().items()} if failures.any else {}
    facts += [
        _count("iterations", summary.iterations),
        _count("full_val_iterations", summary.full_val_iterations),
        Fact(
            label="wall clock",
            quantity="wall_clock",
            low=wall_clock.low,
            high=wall_clock.high,
            runs=(0,),
            reported=wall_clock.said.removeprefix("about "),
            unit="min",
            per_unit=60.0,
            precision=wall_clock.precision,
        ),
    ]
    runs = [dataclasses.replace(r, setup=dataclasses.replace(r.setup, prompt=prompt)) for r in runs]
    return Summaries(path, tuple(runs), tuple(facts), fixed | priors, options)


def _count(quantity: str, value: int) -> Fact:
    return Fact(quantity.replace("_", " "), quantity, float(value), float(value), (0,), str(value))


def _scored(search: str, run: PastRun) -> bool:
    """Whether the search is inferred as the quality model: where the validation scores are
    known (gepa_state.bin, else gepa's log lines), unless acceptance rates are asked for."""
    if search == "quality" and run.val_scores is None:
        raise PxnError(
            "needs the run's validation scores, which gepa_state.bin keeps and gepa's log "
            f"lines show (its run_log.txt, or the log DSPy printed): {run.val_note}; give "
            "either, or calibrate with acceptance rates instead",
            subject="search model",
        )
    return run.val_scores is not None and search != "rates"


def _with_run_spread_prior(scenario: Scenario, notes: list[str]) -> Scenario:
    """The scenario's draws with each model's run spread from the prior: one run cannot
    show how the next one's conditions differ."""
    if scenario.uncertainty is None:
        return scenario
    rng = np.random.default_rng(RUN_SPREAD_SEED)
    draws = with_prior_run_spreads(scenario.uncertainty.draws, rng)
    source = f"{scenario.uncertainty.source}; {PRIOR_SOURCE}"
    notes.append(f"run spread: not identifiable from one run: {PRIOR_SOURCE}")
    return scenario.replace(uncertainty=Uncertainty(source, draws))


def _bookkeeping_fields(
    units: Units, failures: FailuresFit, merges: MergeFit, setup: RunSetup, scored: bool
) -> dict[str, object]:
    """What the run's decisions say beside the inference: lost proposals, the front's share,
    skips (the quality model makes its own), the optimizer's scheduling, merges."""
    return {
        "failures": failures.failures,
        "front_share": fit_front_share(units.parents).chosen,
        "skip_perfect": 0.0 if scored else fit_skip(units.tasks, units.unskipped).probability,
        "worker_split": "per_candidate" if setup.dspy else "pooled",
        "optimizer": "dspy.GEPA" if setup.dspy else "gepa",
        **{
            k: v
            for k, v in merges.scenario_fields().items()
            if not (scored and k == "merge_acceptance")
        },
    }


def _latency_priors(
    stages: StageLatency | None, reflections: ReflectionLatency | None
) -> dict[str, Prior]:
    """The inference's priors on the latencies the run's marked stages and log lines time."""
    priors = {} if stages is None else latency_priors(stages.latency, "rollout")
    if reflections is None:
        return priors
    return priors | latency_priors(reflections.latency, "reflection")


def _as_trace(run: PastRun, setup: RunSetup) -> Trace:
    """The run as a trace of the one schema (scores, decisions, counts; no durations),
    written and read back as any trace is."""
    with tempfile.TemporaryDirectory(prefix="pxn-past-run-") as tmp:
        meta = {"dspy": "3.4.1"} if setup.dspy else {}
        events = past_run_events(
            run,
            workers=setup.workers,
            reflection_concurrency=setup.reflection_concurrency,
            budget=setup.budget,
            meta=meta,
        )
        trace_path = write_past_run_trace(Path(tmp) / TRACE_FILE, events)
        return load_traces([trace_path]).traces[0]


def _marked_stages(
    run: PastRun, tracked: MlflowRun | None, log: GepaLog | None, workers: int
) -> tuple[StageLatency | None, ReflectionLatency | None]:
    """The rollout and reflection latencies the marked stages' spans measure: MLflow's, to
    the millisecond, before DSPy's log's, to the second."""
    stages = reflections = None
    if tracked is not None:
        source = "MLflow's stage times"
        marked = mlflow_stage_spans(run, tracked)
        stages = fit_stage_latency(marked.rollouts, workers, source)
        reflections = fit_reflection_latency(marked, stages, workers, source)
    if log is not None and log.timed:
        source = "DSPy's log lines"
        marked = log_stage_spans(run, log)
        if stages is None and not coarse([s.span for s in marked.rollouts]):
            stages = fit_stage_latency(marked.rollouts, workers, source)
        if reflections is None:
            reflections = fit_reflection_latency(marked, stages, workers, source)
    return stages, reflections


def _log(files: RunDirFiles, given: str | Path | None) -> GepaLog | None:
    if given is not None:
        return read_log_file(given)
    if files.log_lines:
        return parse_log(files.log_lines, str(files.path / GEPA_LOG))
    return None


def _setup(
    files: RunDirFiles,
    run: PastRun,
    log: GepaLog | None,
    workers: int | None,
    concurrency: int | None,
    budget: int | None,
) -> RunSetup:
    """W, C and B: given, else what the run shows, else one line asking for them."""
    dspy = (files.state is not None and files.state.dspy) or (log is not None and log.timed)
    if workers is None:
        raise PxnError(
            "is not kept in a run_dir (the adapter decides how many rollouts run at once): give "
            "the W the run had" + (" (dspy.GEPA's num_threads)" if dspy else ""),
            subject="workers",
        )
    if workers < 1:
        raise PxnError(f"must be a whole number >= 1: got {workers}", subject="workers")
    k = run.shape.k
    if dspy:
        if concurrency not in (None, 1):
            raise PxnError(
                f"is 1 for dspy.GEPA, whose adapter reflects one task at a time: got {concurrency}",
                subject="reflection concurrency",
            )
        concurrency, reflections = 1, "dspy.GEPA reflects one task at a time"
    elif concurrency is not None:
        reflections = "given"
    elif k == 1:
        concurrency, reflections = 1, "one reflection an iteration"
    else:
        raise PxnError(
            f"is not kept in a run_dir: give the reflections the run made at once (its {k} "
            "an iteration with gepa's own LM, up to 10; 1 with a plain callable)",
            subject="reflection concurrency",
        )
    if budget is not None:
        source = "given"
    elif log is not None and log.budget is not None:
        budget, source = log.budget, "DSPy's log: its approx metric calls"
    else:
        budget = run.budget_high
        source = (
            f"the metric calls the run made; its max_metric_calls lay in ({run.budget_low}, "
            f"{run.budget_high}], every one of which stops it where it stopped"
        )
    said = (f"W={workers} (given)", f"C={concurrency} ({reflections})", f"B={budget} ({source})")
    return RunSetup(workers, concurrency, budget, dspy, said)
