"""The latencies from the stage times a run's MLflow run or DSPy's log keeps.

Each rollout stage gepa marks is one adapter call (`batch_evaluate` over all its pairs),
so a stage marked at both ends spans the makespan of its rollouts on the W workers, as an
untimed adapter call does in a recorded trace; untimed_latency.py's likelihood fits the
rollout latency to those spans. MLflow's points (mlflow_run.py) mark the seed's
validation (the run's start to step 0), a parents' minibatch (the previous iteration's
last point to `selected_program_candidate`, gepa's state save inside it) and a full
validation (`subsample/after` to the iteration's last `val_program_average`). The
reflections and the children's minibatch between them are not separable: the reflection
latency is what the wall-clock leaves (calibration.py).

DSPy's log lines (gepa_log.py) mark more, each to the second: the seed's validation, a
parents' minibatch and, in a single run, the reflection ("Selected program" to the first
"Proposed new text") and a rejected child's minibatch. Spans rounded to the second are
used only when their median is at least LOG_RESOLUTION_FACTOR seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pxn.calibrate.past_runs.gepa_log import GepaLog
from pxn.calibrate.past_runs.mlflow_run import MlflowRun, steps
from pxn.calibrate.past_runs.past_run import IterationRecord, PastRun
from pxn.calibrate.summaries.priors import DEFAULT_PRIORS, Prior
from pxn.calibrate.traces.fit import LatencyFit, fit_latency
from pxn.calibrate.traces.makespan import Spans
from pxn.calibrate.traces.untimed_latency import UntimedFit, fit_untimed_latency

MIN_SPANS = 3  # fewer marked stages fit no latency
# Log times are whole seconds: spans whose median is shorter than this many seconds are
# too coarse to time anything by.
LOG_RESOLUTION_FACTOR = 5.0
NORMAL_95 = 1.959964  # a normal's 95% reaches this many sds either side
MIN_LOG_SD = 0.02  # a narrower prior than this would pin a latency no run pins so well
MIN_S_WIDTH = 0.02


@dataclass(frozen=True)
class StageSpan:
    iteration: int  # 0: the seed
    phase: str
    span: float  # seconds
    rollouts: int


@dataclass(frozen=True)
class StageLatency:
    source: str  # what marked the stages: "MLflow's stage times", "DSPy's log lines"
    spans: tuple[StageSpan, ...]
    latency: LatencyFit
    untimed: UntimedFit
    notes: tuple[str, ...]


def mlflow_stage_spans(run: PastRun, tracked: MlflowRun) -> list[StageSpan]:
    """The rollout stages both of whose ends the MLflow run marks."""
    selected = steps(tracked.points("selected_program_candidate"))
    after = steps(tracked.points("subsample/after"))
    validated = steps(tracked.points("val_program_average"))
    every: dict[int, list[float]] = {}
    for key in tracked.metrics:
        for step, times in steps(tracked.points(key)).items():
            every.setdefault(step, []).extend(times)
    spans = []
    if 0 in validated:
        spans.append(StageSpan(0, "seed_val", min(validated[0]) - tracked.start, len(run.valset)))
    for record in run.iterations:
        i = record.number
        previous = every.get(i - 1)
        if previous and i in selected and record.merge is None:
            spans.append(
                StageSpan(i, "parent_minibatch", min(selected[i]) - max(previous), _parents(record))
            )
        if record.new_programs and record.merge is None and i in after and i in validated:
            spans.append(
                StageSpan(
                    i,
                    "full_val",
                    max(validated[i]) - max(after[i]),
                    len(record.new_programs) * len(run.valset),
                )
            )
    return [s for s in spans if s.span > 0 and s.rollouts > 0]


def _parents(record: IterationRecord) -> int:
    """The parents' minibatch rollouts: each distinct (parent, minibatch) evaluated once."""
    return sum(len(mb) for _, mb in {(t.parent, tuple(t.minibatch)) for t in record.tasks})


def fit_stage_latency(spans: list[StageSpan], workers: int, source: str) -> StageLatency | None:
    """The rollout latency the spans support (None below MIN_SPANS)."""
    if len(spans) < MIN_SPANS:
        return None
    table = Spans(
        np.array([s.span for s in spans], dtype=float),
        np.array([s.rollouts for s in spans], dtype=int),
        np.full(len(spans), workers, dtype=int),
    )
    notes: list[str] = []
    latency, untimed = fit_untimed_latency(
        table,
        0,
        np.empty(0),
        np.empty(0),
        servers=None,
        slowdown=0.0,
        choice="auto",
        notes=notes,
    )
    return StageLatency(source, tuple(spans), latency, untimed, tuple(notes))


@dataclass(frozen=True)
class LogSpans:
    rollouts: list[StageSpan]
    reflections: list[float]  # seconds, one reflection each


def log_stage_spans(run: PastRun, log: GepaLog) -> LogSpans:
    """The stages DSPy's log lines mark (module docstring); none without their times."""
    if not log.timed:
        return LogSpans([], [])
    by_iteration: dict[int | None, list] = {}
    for line in log.lines:
        if line.time is not None:
            by_iteration.setdefault(line.iteration, []).append(line)
    first = next(ln.time for ln in log.lines if ln.time is not None)
    rollouts: list[StageSpan] = []
    reflections: list[float] = []
    seed = _first(by_iteration.get(0, []), "Base program full valset score")
    if seed is not None:
        rollouts.append(StageSpan(0, "seed_val", (seed - first).total_seconds(), len(run.valset)))
    for record in run.iterations:
        i, lines = record.number, by_iteration.get(record.number, [])
        before = by_iteration.get(i - 1, [])
        selected = _first(lines, "Selected program")
        if selected is None or not before or record.merge is not None:
            continue
        parent_span = (selected - before[-1].time).total_seconds()
        rollouts.append(StageSpan(i, "parent_minibatch", parent_span, _parents(record)))
        proposed = [ln.time for ln in lines if ln.text.startswith("Proposed new text")]
        if len(record.tasks) != 1 or not proposed:
            continue
        reflections.append((proposed[0] - selected).total_seconds())
        rejected = _first(lines, "New subsample score")
        if rejected is not None and record.tasks[0].judged:
            child = (rejected - proposed[-1]).total_seconds()
            rollouts.append(StageSpan(i, "child_minibatch", child, len(record.tasks[0].minibatch)))
    return LogSpans([r for r in rollouts if r.span > 0], [r for r in reflections if r > 0])


def _first(lines: list, start: str):
    return next((ln.time for ln in lines if ln.text.startswith(start)), None)


def coarse(seconds: list[float]) -> bool:
    """Whether spans timed to the second are too short to time anything by."""
    return not seconds or float(np.median(seconds)) < LOG_RESOLUTION_FACTOR


def fit_reflection_spans(spans: list[float]) -> LatencyFit | None:
    """The reflection latency as a lognormal fitted to its spans (None below MIN_SPANS)."""
    if len(spans) < MIN_SPANS:
        return None
    return fit_latency("reflection", spans, "lognorm")


def latency_priors(fit: LatencyFit, kind: str) -> dict[str, Prior]:
    """A latency's priors narrowed to a fit: its median lognormal about the fit with the
    bootstrap's 95% as its 95%, its log-sd uniform over the bootstrap's 95% (within the
    default prior's range)."""
    low, high = fit.param_ci["scale"]
    median = fit.chosen.params["scale"]
    log_sd = max(math.log(high / low) / (2 * NORMAL_95), MIN_LOG_SD)
    s_low, s_high = fit.param_ci["s"]
    default = DEFAULT_PRIORS[f"{kind}.s"]
    s_low = min(max(s_low, default.a), default.b - MIN_S_WIDTH)
    s_high = min(max(s_high, s_low + MIN_S_WIDTH), default.b)
    return {
        f"{kind}.scale": Prior("lognormal", median, log_sd),
        f"{kind}.s": Prior("uniform", s_low, s_high),
    }
