"""The rollout latency from the stage times an MLflow run keeps: spans read as makespans.

gepa logs a metric point at the end of three of an iteration's stages
(mlflow_run.py): after the parents' minibatch evaluation, after the
children's, after each new program's full validation; and one after the
seed's validation. Each stage is one adapter call (gepa calls the adapter
once per stage, `batch_evaluate` over all its pairs), so where both ends of
a rollout stage are marked its span is the makespan of its rollouts on the
W workers, as an untimed adapter call's is in a recorded trace
(calibrate/traces/untimed.py), and the same likelihood
(calibrate/traces/untimed_latency.py) fits the rollout latency to them:

- the seed's validation: from the MLflow run's start (gepa starts it just
  before the seed's validation) to step 0's points;
- a parents' minibatch: from the previous iteration's last point to this
  one's `selected_program_candidate` (gepa saving its state between them is
  inside the span: a small upward bias, larger as the state grows);
- a full validation: from `subsample/after` (the children's evaluation
  ended) to the last `val_program_average` of the iteration.

Not separable, and so not used for a latency: the reflections and the
children's minibatch between `selected_program_candidate` and
`subsample/after` (gepa marks no end of the reflections). The reflection
latency is then what the wall-clock leaves once the rollouts are timed
(inference.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pxn.calibrate.past_runs.mlflow_run import MlflowRun, steps
from pxn.calibrate.past_runs.past_run import IterationRecord, PastRun
from pxn.calibrate.summaries.priors import DEFAULT_PRIORS, Prior
from pxn.calibrate.traces.fit import LatencyFit
from pxn.calibrate.traces.makespan import Spans
from pxn.calibrate.traces.untimed_latency import UntimedFit, fit_untimed_latency

MIN_SPANS = 3  # fewer marked stages fit no latency
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


def fit_stage_latency(spans: list[StageSpan], workers: int) -> StageLatency | None:
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
    return StageLatency(tuple(spans), latency, untimed, tuple(notes))


def rollout_priors(stage: StageLatency) -> dict[str, Prior]:
    """The rollout latency's priors narrowed to what the spans measured: its median
    lognormal about the fit with the bootstrap's 95% as its 95%, its log-sd uniform over
    the bootstrap's 95% (within the default prior's range)."""
    low, high = stage.latency.param_ci["scale"]
    median = stage.latency.chosen.params["scale"]
    log_sd = max(math.log(high / low) / (2 * NORMAL_95), MIN_LOG_SD)
    s_low, s_high = stage.latency.param_ci["s"]
    default = DEFAULT_PRIORS["rollout.s"]
    s_low, s_high = max(s_low, default.a), min(max(s_high, s_low + MIN_S_WIDTH), default.b)
    return {
        "rollout.scale": Prior("lognormal", median, log_sd),
        "rollout.s": Prior("uniform", s_low, s_high),
    }
