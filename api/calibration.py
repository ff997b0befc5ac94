"""A scenario from measured runs: `calibrate` fits one from traces, or infers one from run
summaries by simulation-based inference (pxn.calibrate)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pxn.api.console import progress_bar
from pxn.api.report import Report, Result, flattened
from pxn.api.running import DEFAULT_JOBS
from pxn.errors import PxnError
from pxn.fields import whole

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from pxn.calibrate.past_runs.calibration import PastCalibration
    from pxn.calibrate.reproduction import Reproduction
    from pxn.calibrate.summaries.abc_smc import Generation
    from pxn.calibrate.summaries.infer import Inference
    from pxn.calibrate.traces.fit import LatencyFit
    from pxn.calibrate.traces.pipeline import Calibration
    from pxn.scenario import Scenario
    from pxn.sim.backends import Backend

# Beyond this a scenario loads slowly (every draw is validated whenever it loads) and no
# prediction runs enough replicates to use its draws.
MAX_DRAWS = 10_000
DEFAULT_DRAWS = 100  # from traces, unless asked otherwise
PREFIX_CACHE = {"auto": None, "yes": True, "no": False}
SUMMARIES_SAY_IT = (
    "applies to traces; with a summaries file its [setup] and [inference] tables say it "
    "(format: pydoc pxn.calibrate.summaries)"
)
PAST_RUN_ONLY = (
    "applies to a run calibrated from its run_dir (or its MLflow run); a trace says it itself"
)
NOT_FOR_PAST_RUNS = "applies to traces; a past run's calibration infers its latencies instead"
# Keywords refused where they have no use (the first given is named, by its words or
# SUBJECTS'): what a summaries file says itself, what a trace says itself, and what a past
# run's calibration infers instead.
SUMMARIES_SAY = (
    "latency",
    "lm_servers",
    "task_model",
    "reflection_model",
    "draws",
    "prefix_cache",
    "search",
    "workers",
)
TRACES_SAY = ("wall_clock", "reflection_concurrency", "budget", "shape", "log", "tracking_uri")
PAST_RUNS_INFER = ("latency", "lm_servers", "task_model", "reflection_model", "prefix_cache")
SUBJECTS = {"lm_servers": "LM servers", "search": "search model"}
TRACE_KEYWORDS = (*SUMMARIES_SAY, "name")  # what each calibration takes
PAST_RUN_KEYWORDS = (*TRACES_SAY, "name", "draws", "search", "workers")


@dataclass(frozen=True)
class CalibrateResult(Result):
    """The calibrated scenario, how it was found, and the report that says so."""

    scenario: Scenario
    # The fits from traces, the inference from summaries, or a past run's calibration.
    fitted: Calibration | Inference | PastCalibration
    lines: tuple[str, ...]  # the report, line by line
    header: str  # the scenario file's header: where it came from, how far to trust it
    # The calibration runs beside the scenario's predictions of them (from traces only).
    reproduction: Reproduction | None = None

    @property
    def reproduces(self) -> bool:
        """Whether the scenario reproduces the runs it came from (True from summaries, whose
        inference checks its facts itself)."""
        return self.reproduction is None or self.reproduction.holds

    def save(self, path: str | Path) -> Path:
        """The scenario as TOML at `path`, the report as its header."""
        self.scenario.save(Path(path), self.header)
        return Path(path)

    def report(self) -> Report:
        document = self.scenario.to_dict()
        if self.reproduction is not None:
            document = {"reproduction": self.reproduction.to_dict(), **document}
        return Report(name="calibration", shown=list(self.lines), rows=[], document=document)

    def rows(self) -> list[dict[str, Any]]:
        """One row, the scenario's parameters: its JSON document, flattened (no CSV has
        them)."""
        return [flattened(self.scenario.to_dict())]

    def fits(self) -> dict[str, LatencyFit]:
        """The latency fits, by what they fit ("rollout", "reflection", "rollout full_val", ...):
        those from traces; an inference from summaries fits none."""
        from pxn.calibrate.traces.pipeline import Calibration

        if not isinstance(self.fitted, Calibration):
            return {}
        cal = self.fitted
        fits = [f for f in (cal.rollout, cal.reflection) if f.n]  # untimed rollouts: none
        fits += [f for f in cal.rollout_by_phase.values() if f.n >= 2]
        return {fit.what: fit for fit in fits}

    def figure(self, fit: str = "rollout") -> Figure:
        """One fit's diagnostics: its histogram with every fitted density, and a Q-Q plot."""
        from pxn.api.fit_plot import latency_fit_figure

        fits = self.fits()
        if fit not in fits:
            have = ", ".join(fits) or "none: an inference from summaries fits no latency"
            raise PxnError(f"is not a latency fit of this calibration: got {fit!r}; fits: {have}",
                           subject="fit")  # fmt: skip
        return latency_fit_figure(fits[fit])


def calibrate(
    traces: str | Path | Iterable[str | Path] | None = None,
    *,
    summaries: str | Path | None = None,
    name: str = "calibrated",
    latency: str = "auto",
    lm_servers: int | None = None,
    task_model: str | None = None,
    reflection_model: str | None = None,
    draws: int | None = None,
    prefix_cache: str = "auto",
    search: str = "auto",
    workers: int | None = None,
    wall_clock: str | None = None,
    reflection_concurrency: int | None = None,
    budget: int | None = None,
    shape: str | None = None,
    log: str | Path | None = None,
    tracking_uri: str | None = None,
    jobs: int = DEFAULT_JOBS,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> CalibrateResult:
    """Fit a scenario from `traces` (trace files or run directories) or one past run (a gepa
    run_dir or dspy.GEPA log_dir as gepa wrote it, or `mlflow:RUN_ID` in the store at
    `tracking_uri`; pxn.calibrate.past_runs), or infer one from `summaries` (a CSV or TOML
    file of per-run figures; pydoc pxn.calibrate.summaries). The other keywords are `pxn
    calibrate`'s flags (its --help says each); `progress` shows the inference's generations
    on stderr."""
    asked = dict(locals())  # first, while the keywords are all that is local
    from pxn.sim.backends import make_backend

    whole(jobs, "jobs")
    if not name.strip():
        raise PxnError("must not be empty: it names the scenario in every report", subject="name")
    if draws is not None and draws > MAX_DRAWS:
        raise PxnError(f"must be at most {MAX_DRAWS} (each draw is checked whenever the "
                       f"scenario loads): got {draws}", subject="draws")  # fmt: skip
    paths = [traces] if isinstance(traces, str | Path) else list(traces or [])
    past = _past_run_sources(paths)
    given = [key for key in (*SUMMARIES_SAY, *TRACES_SAY) if asked[key] != DEFAULTS[key]]
    if not past:
        refuse_given(given, TRACES_SAY, PAST_RUN_ONLY)
    if summaries is not None:
        if paths:
            raise PxnError("give trace files or a summaries file, not both")
        refuse_given(given, SUMMARIES_SAY, SUMMARIES_SAY_IT)
    elif not paths:
        raise PxnError("give trace files (or run directories), or a summaries file")
    elif past and len(paths) > 1:
        raise PxnError(
            "give one past run at a time (a run_dir, or mlflow:RUN_ID): its calibration "
            "reads one run; traces of several runs calibrate together"
        )
    elif past:
        refuse_given(given, PAST_RUNS_INFER, NOT_FOR_PAST_RUNS)
    elif prefix_cache not in PREFIX_CACHE:
        raise PxnError(f"must be auto, yes or no: got {prefix_cache!r}", subject="prefix cache")
    asked["draws"] = DEFAULT_DRAWS if draws is None else draws
    with make_backend(backend, address, jobs) as the_backend:
        if summaries is not None:
            return from_summaries(Path(summaries), name, the_backend, progress)
        if past:
            options = {key: asked[key] for key in PAST_RUN_KEYWORDS}
            return from_past_run(str(paths[0]), backend=the_backend, progress=progress, **options)
        options = {key: asked[key] for key in TRACE_KEYWORDS}
        options["prefix_cache"] = PREFIX_CACHE[prefix_cache]
        return from_traces(paths, backend=the_backend, progress=progress, **options)


# A keyword at its default was not given.
DEFAULTS = {key: p.default for key, p in inspect.signature(calibrate).parameters.items()}


@contextmanager
def generations_told(
    progress: bool, what: str, total: int | None = None, visible: bool = True
) -> Iterator[Callable[[Generation], None]]:
    """A function telling each ABC-SMC generation on a progress bar: on a terminal only,
    gone when done (errors stay one line); shown from the first generation on."""
    from pxn.api.calibration_report import generation_line

    with progress_bar(progress) as bar:
        task = bar.add_task(what, total=total, visible=visible)

        def told(generation: Generation) -> None:
            advance = 0 if total is None else 1
            bar.update(task, advance=advance, visible=True, description=generation_line(generation))

        yield told


def refuse_given(given: list[str], refused: tuple[str, ...], why: str) -> None:
    """The first of the `refused` keywords `given`, refused with `why`."""
    for key in refused:
        if key in given:
            raise PxnError(why, subject=SUBJECTS.get(key, key.replace("_", " ")))


def from_traces(
    paths: list[str | Path], progress: bool, backend: Backend, **options
) -> CalibrateResult:
    from pxn.api.calibration_report import calibration_header, calibration_lines
    from pxn.calibrate.reproduction import reproduce
    from pxn.calibrate.traces.pipeline import calibrate_traces

    # The quality model's inference, when there is one.
    with generations_told(progress, "quality model: ABC-SMC", visible=False) as told:
        calibration = calibrate_traces(paths, on_generation=told, backend=backend, **options)
    reproduction = reproduce(calibration.scenario, calibration.traces, backend=backend)
    first = [*reproduction.lines(), *search_refusal(calibration)]
    return CalibrateResult(
        calibration.scenario,
        calibration,
        tuple([*first, *calibration_lines(calibration)]),
        calibration_header(calibration, first),
        reproduction,
    )


def search_refusal(calibration: Calibration) -> list[str]:
    """The first paragraph's line when the traces' scores gave no quality model: then the
    scenario predicts no score, which a user reading its predictions must know first."""
    if calibration.quality_refused is None:
        return []
    return [
        "no score predictions: the quality model could not be fitted to the runs' scores "
        f"({calibration.quality_refused}); the scenario keeps acceptance rates, and predicts "
        "time, cost and proposals only"
    ]


def from_summaries(path: Path, name: str, backend: Backend, progress: bool) -> CalibrateResult:
    from pxn.api.calibration_report import inference_header, inference_lines
    from pxn.calibrate.summaries.infer import infer_from_summaries
    from pxn.calibrate.summaries.reading import read_summaries

    read = read_summaries(path)
    total = read.options.max_generations + 1
    with generations_told(progress, "ABC-SMC", total) as told:
        inference = infer_from_summaries(read, name, on_generation=told, backend=backend)
    return CalibrateResult(
        inference.scenario,
        inference,
        tuple(inference_lines(inference)),
        inference_header(inference),
    )


def _past_run_sources(paths: list[str | Path]) -> bool:
    """Whether the paths name a past run (a gepa run_dir without a pxn trace, or an MLflow
    run) rather than traces; PxnError when they mix the two."""
    from pxn.calibrate.past_runs.mlflow_run import is_mlflow_reference
    from pxn.calibrate.past_runs.run_dir import is_run_dir
    from pxn.trace_reading import TRACE_NAME

    def is_past(path: str | Path) -> bool:
        if is_mlflow_reference(str(path)):
            return True
        path = Path(path)
        return is_run_dir(path) and not (path / TRACE_NAME).exists()

    kinds = {is_past(path) for path in paths}
    if len(kinds) > 1:
        raise PxnError(
            "give traces or one past run (a run_dir, or mlflow:RUN_ID), not both: a run "
            "recorded with pxn keeps gepa's run_dir beside its trace, and the trace says more"
        )
    return kinds == {True}


def from_past_run(
    source: str,
    *,
    backend: Backend,
    progress: bool,
    shape: str | None,
    tracking_uri: str | None,
    **options: Any,
) -> CalibrateResult:
    """A past run (a run_dir, or an MLflow run and the run_dir it names) calibrated;
    `options` are calibrate_past_run's."""
    from pxn.api.calibration_report import inference_header, inference_lines
    from pxn.calibrate.past_runs.calibration import calibrate_past_run
    from pxn.calibrate.past_runs.mlflow_run import (
        find_tracked_run,
        is_mlflow_reference,
        read_mlflow_run,
    )
    from pxn.calibrate.past_runs.report import past_run_lines
    from pxn.shape import Shape

    if is_mlflow_reference(source):
        tracked = read_mlflow_run(source, tracking_uri)
        if tracked.run_dir is None or not Path(tracked.run_dir).is_dir():
            where = "no run_dir" if tracked.run_dir is None else f"run_dir {tracked.run_dir}"
            raise PxnError(
                f"logged {where} that is here: its metrics time the run, and gepa's run_dir "
                "holds its search; give the run_dir where it was moved, with this tracking URI",
                subject=f"MLflow run {source}",
            )
        run_dir = Path(tracked.run_dir)
    else:
        run_dir, tracked = Path(source), None
        if tracking_uri is not None:
            found = find_tracked_run(run_dir, tracking_uri)
            if found is None:
                raise PxnError(
                    f"holds no run gepa tracked with run_dir {run_dir.name}: give "
                    "mlflow:RUN_ID, or leave the tracking URI out",
                    subject=f"MLflow store {tracking_uri}",
                )
            tracked = read_mlflow_run(f"mlflow:{found}", tracking_uri)
    with generations_told(progress, "ABC-SMC") as told:
        calibration = calibrate_past_run(
            run_dir,
            shape=None if shape is None else Shape.parse(shape),
            tracked=tracked,
            on_generation=told,
            backend=backend,
            **options,
        )
    intro = past_run_lines(calibration)
    return CalibrateResult(
        calibration.scenario,
        calibration,
        tuple([*intro, *inference_lines(calibration.inference)]),
        inference_header(calibration.inference, "\n".join(intro)),
    )
