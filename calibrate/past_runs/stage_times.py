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

A candidate's rollouts take their own time (its prompt's length, its answers'), and the
run's accepted candidates set how long its stages took. Each span of one candidate's
rollouts (the seed's validation, a single parent's minibatch, a child's full validation)
gives each candidate's latency factor over the seed's, by medians within each kind of
stage. Kept where the candidates' spans differ, the seed's among them (Kruskal-Wallis,
p < ALPHA), and one candidate's factor from the seed's by more than DIFFERS: the spans are
then divided by their candidates' factors before the latency fit (the seed's latency),
and the factors are the scenario's [prompt] lengths at exponent 1, each proposal's drawn
from the accepted ones' (a run_dir keeps no token counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from pxn.calibrate.past_runs.gepa_log import GepaLog
from pxn.calibrate.past_runs.mlflow_run import MlflowRun, steps
from pxn.calibrate.past_runs.past_run import IterationRecord, PastRun
from pxn.calibrate.summaries.priors import DEFAULT_PRIORS, Prior
from pxn.calibrate.traces.fit import LatencyFit, fit_latency
from pxn.calibrate.traces.makespan import Spans
from pxn.calibrate.traces.prompt_lengths import DIFFERS
from pxn.calibrate.traces.untimed_latency import UntimedFit, fit_untimed_latency
from pxn.prompt_lengths import PromptLengths

MIN_SPANS = 3  # fewer marked stages fit no latency
# Log times are whole seconds: spans whose median is shorter than this many seconds are
# too coarse to time anything by.
LOG_RESOLUTION_FACTOR = 5.0
NORMAL_95 = 1.959964  # a normal's 95% reaches this many sds either side
MIN_LOG_SD = 0.02  # a narrower prior than this would pin a latency no run pins so well
MIN_S_WIDTH = 0.02
ALPHA = 0.05  # the candidates' latency factors are kept below this test's p-value
VALSET_PHASES = ("seed_val", "full_val")  # V rollouts of one candidate: one kind of stage


@dataclass(frozen=True)
class StageSpan:
    iteration: int  # 0: the seed
    phase: str
    span: float  # seconds
    rollouts: int
    candidates: tuple[int, ...] = ()  # whose rollouts (empty: a child never in the pool)

    @property
    def kind(self) -> tuple[str, int]:
        """Stages alike but for their candidates: the valset's, or minibatches of a size."""
        return ("valset" if self.phase in VALSET_PHASES else "minibatch", self.rollouts)


@dataclass(frozen=True)
class CandidateFactors:
    factors: dict[int, float]  # each candidate's latency over the seed's, where fitted
    pvalue: float
    chosen: PromptLengths | None
    reason: str

    def of(self, span: StageSpan) -> float:
        """A span's latency over the seed's: its candidates' mean factor; a child never in
        the pool (or one unfitted) at the proposals' mean."""
        if self.chosen is None:
            return 1.0
        unknown = float(np.mean(self.chosen.lengths))
        factors = {0: 1.0} | self.factors
        known = [factors.get(c, unknown) for c in span.candidates]
        return float(np.mean(known)) if known else unknown


@dataclass(frozen=True)
class StageLatency:
    source: str  # what marked the stages: "MLflow's stage times", "DSPy's log lines"
    spans: tuple[StageSpan, ...]
    latency: LatencyFit  # the seed's, where the candidates' factors are kept
    untimed: UntimedFit
    candidates: CandidateFactors
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
        seed = min(validated[0]) - tracked.start
        spans.append(StageSpan(0, "seed_val", seed, len(run.valset), (0,)))
    for record in run.iterations:
        i = record.number
        previous = every.get(i - 1)
        if previous and i in selected and record.merge is None:
            span = min(selected[i]) - max(previous)
            spans.append(StageSpan(i, "parent_minibatch", span, *_parents(record)))
        if record.new_programs and record.merge is None and i in after and i in validated:
            span = max(validated[i]) - max(after[i])
            rollouts = len(record.new_programs) * len(run.valset)
            spans.append(StageSpan(i, "full_val", span, rollouts, record.new_programs))
    return [s for s in spans if s.span > 0 and s.rollouts > 0]


def _parents(record: IterationRecord) -> tuple[int, tuple[int, ...]]:
    """The parents' minibatch rollouts (each distinct (parent, minibatch) evaluated once) and
    the parents."""
    evaluated = {(t.parent, tuple(t.minibatch)) for t in record.tasks}
    return sum(len(mb) for _, mb in evaluated), tuple(sorted({p for p, _ in evaluated}))


def fit_candidate_factors(spans: list[StageSpan]) -> CandidateFactors:
    """Each candidate's latency factor over the seed's from the spans of one candidate's
    rollouts (module docstring). Spans are heavy-tailed (a makespan waits on its slowest
    call), so by ranks and medians: each span's log over the seed's median log span of its
    kind, a candidate's factor the median of its spans', and the test Kruskal-Wallis's over
    the candidates, the seed among them."""
    seed_medians = _seed_medians([s for s in spans if s.candidates == (0,)])
    alone = [s for s in spans if len(s.candidates) == 1 and s.kind in seed_medians]
    centred: dict[int, list[float]] = {}
    for s in alone:
        centred.setdefault(s.candidates[0], []).append(math.log(s.span) - seed_medians[s.kind])
    seed = centred.pop(0, [])
    if not centred or len(seed) < 2:
        reason = "not fitted: no candidate but the seed timed alone in a stage the seed was"
        return CandidateFactors({}, math.nan, None, reason)
    factors = {c: float(math.exp(np.median(v))) for c, v in sorted(centred.items())}
    groups = [seed, *centred.values()]
    tied = np.ptp(np.concatenate(groups)) == 0  # spans to the second can all agree
    pvalue = 1.0 if tied else float(scipy.stats.kruskal(*groups).pvalue)
    said = ", ".join(f"candidate {c} x{f:.2f}" for c, f in factors.items())
    test = f"Kruskal-Wallis p={pvalue:.2g}, {len(alone)} spans"
    measured = f"rollouts over the seed's: {said} ({test})"
    if pvalue >= ALPHA or max(abs(f - 1) for f in factors.values()) <= DIFFERS:
        why = f"{measured}: not kept, every candidate's taken as the seed's"
        return CandidateFactors(factors, pvalue, None, why)
    chosen = PromptLengths(1.0, tuple(factors.values()))
    why = (
        f"{measured}: kept as [prompt], the latency fitted the seed's and each proposal's "
        "factor drawn from these (no token counts: exponent 1)"
    )
    return CandidateFactors(factors, pvalue, chosen, why)


def _seed_medians(seed_spans: list[StageSpan]) -> dict[tuple[str, int], float]:
    """The seed's median log span in each kind of stage it was timed in."""
    by_kind: dict[tuple[str, int], list[float]] = {}
    for s in seed_spans:
        by_kind.setdefault(s.kind, []).append(math.log(s.span))
    return {kind: float(np.median(logs)) for kind, logs in by_kind.items()}


def fit_stage_latency(spans: list[StageSpan], workers: int, source: str) -> StageLatency | None:
    """The seed's rollout latency the spans support, each span taken at its candidates'
    factor (None below MIN_SPANS)."""
    if len(spans) < MIN_SPANS:
        return None
    candidates = fit_candidate_factors(spans)
    table = Spans(
        np.array([s.span / candidates.of(s) for s in spans], dtype=float),
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
    return StageLatency(source, tuple(spans), latency, untimed, candidates, tuple(notes))


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
        span = (seed - first).total_seconds()
        rollouts.append(StageSpan(0, "seed_val", span, len(run.valset), (0,)))
    for record in run.iterations:
        i, lines = record.number, by_iteration.get(record.number, [])
        before = by_iteration.get(i - 1, [])
        selected = _first(lines, "Selected program")
        if selected is None or not before or record.merge is not None:
            continue
        parent_span = (selected - before[-1].time).total_seconds()
        rollouts.append(StageSpan(i, "parent_minibatch", parent_span, *_parents(record)))
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
