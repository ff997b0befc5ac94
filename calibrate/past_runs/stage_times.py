"""The latencies from the stage times a run's MLflow run or DSPy's log keeps.

docs/calibration.md ("The time", "What is fitted, and how") says which marks bound which
stage. Each rollout stage gepa marks is one adapter call (`batch_evaluate` over all its
pairs), so a stage marked at both ends spans the makespan of its rollouts on the W workers,
fitted as a recorded untimed adapter call is (makespan.py). A single task's span from
its parent's selection to its child's verdict holds its reflection and then its child's
minibatch: the reflection is that span less the minibatch at its mean makespan under the
rollout latency the stages measured. DSPy's log lines, to the second, also time the
reflection alone; spans rounded to the second are used only when their median is at least
LOG_RESOLUTION_FACTOR seconds.

A candidate's rollouts take their own time (its prompt's length, its answers'): each span of
one candidate's rollouts gives its latency factor over the seed's, kept where the candidates'
spans differ (Kruskal-Wallis, p < ALPHA) by more than DIFFERS; the spans are then divided by
their factors before the fit (the seed's latency), and the factors are the scenario's
[prompt] lengths at exponent 1 (a run_dir keeps no token counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.stats

from pxn.calibrate.past_runs.gepa_log import GepaLog
from pxn.calibrate.past_runs.mlflow_run import MlflowRun
from pxn.calibrate.past_runs.past_run import IterationRecord, PastRun
from pxn.calibrate.summaries.priors import DEFAULT_PRIORS, Prior
from pxn.calibrate.traces.fit import MIN_FIT_POINTS, LatencyFit, fit_latency
from pxn.calibrate.traces.makespan import Spans, fit_untimed_latency, mean_makespan
from pxn.calibrate.traces.prompt_lengths import DIFFERS
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
        factors = {0: 1.0} | self.factors
        known = [factors.get(c, self.proposal) for c in span.candidates]
        return float(np.mean(known)) if known else self.proposal

    @property
    def proposal(self) -> float:
        """A new child's latency over the seed's: the proposals' mean factor."""
        return 1.0 if self.chosen is None else float(np.mean(self.chosen.lengths))


@dataclass(frozen=True)
class StageLatency:
    source: str  # what marked the stages: "MLflow's stage times", "DSPy's log lines"
    spans: tuple[StageSpan, ...]
    latency: LatencyFit  # the seed's, where the candidates' factors are kept
    candidates: CandidateFactors
    notes: tuple[str, ...]


@dataclass(frozen=True)
class ProposalSpan:
    """A single task's reflection and then its child's minibatch, marked at both ends."""

    iteration: int
    span: float  # seconds
    child_rollouts: int


@dataclass(frozen=True)
class MarkedSpans:
    rollouts: list[StageSpan]
    reflections: list[float] = field(default_factory=list)  # seconds, one reflection each
    proposals: list[ProposalSpan] = field(default_factory=list)
    to_the_second: bool = False  # DSPy's log's times

    def fit_reflections(self, spans: list[float]) -> bool:
        """Whether spans are enough, and fine enough, to fit the reflection latency to."""
        if len(spans) < MIN_FIT_POINTS or np.ptp(spans) == 0:
            return False
        return not (self.to_the_second and coarse(spans))


@dataclass(frozen=True)
class ReflectionLatency:
    source: str  # what marked the spans
    spans: str  # what each span held, for the report
    latency: LatencyFit


def mlflow_stage_spans(run: PastRun, tracked: MlflowRun) -> MarkedSpans:
    """The rollout stages and the single tasks' proposals both of whose ends the MLflow run
    marks."""
    selected = tracked.steps("selected_program_candidate")
    after = tracked.steps("subsample/after")
    validated = tracked.steps("val_program_average")
    every = tracked.steps(*tracked.metrics)
    spans, proposals = [], []
    if 0 in validated:
        seed = min(validated[0]) - tracked.start
        spans.append(StageSpan(0, "seed_val", seed, len(run.valset), (0,)))
    for record in run.iterations:
        i = record.number
        previous = every.get(i - 1)
        if previous and i in selected and record.merge is None:
            span = min(selected[i]) - max(previous)
            spans.append(StageSpan(i, "parent_minibatch", span, *_parents(record)))
        if len(record.tasks) == 1 and record.tasks[0].judged and i in selected and i in after:
            span = min(after[i]) - max(selected[i])
            proposals.append(ProposalSpan(i, span, len(record.tasks[0].minibatch)))
        if record.new_programs and record.merge is None and i in after and i in validated:
            span = max(validated[i]) - max(after[i])
            rollouts = len(record.new_programs) * len(run.valset)
            spans.append(StageSpan(i, "full_val", span, rollouts, record.new_programs))
    return MarkedSpans(
        [s for s in spans if s.span > 0 and s.rollouts > 0],
        proposals=[p for p in proposals if p.span > 0],
    )


def _parents(record: IterationRecord) -> tuple[int, tuple[int, ...]]:
    """The parents' minibatch rollouts and the parents."""
    evaluated = record.parent_evaluations()
    return sum(len(t.minibatch) for t in evaluated), tuple(sorted({t.parent for t in evaluated}))


def fit_candidate_factors(spans: list[StageSpan]) -> CandidateFactors:
    """Each candidate's latency factor over the seed's from the spans of one candidate's
    rollouts (module docstring). Spans are heavy-tailed (a makespan waits on its slowest
    call), so by ranks and medians: each span's log over the seed's median log span of its
    kind, a candidate's factor the median of its spans', and the test Kruskal-Wallis's over
    the candidates, the seed among them. Rejected children timed alone (DSPy's log) are
    proposals as the run made them, not only those it kept: where MIN_SPANS or more are,
    each one's factor is a proposal's length."""
    seed_medians = _seed_medians([s for s in spans if s.candidates == (0,)])
    alone = [s for s in spans if len(s.candidates) == 1 and s.kind in seed_medians]
    centred: dict[int, list[float]] = {}
    for s in alone:
        centred.setdefault(s.candidates[0], []).append(math.log(s.span) - seed_medians[s.kind])
    children = [
        math.log(s.span) - seed_medians[s.kind]
        for s in spans
        if s.phase == "child_minibatch" and s.kind in seed_medians
    ]
    children = children if len(children) >= MIN_SPANS else []
    seed = centred.pop(0, [])
    if not (centred or children) or len(seed) < 2:
        reason = "not fitted: no candidate but the seed timed alone in a stage the seed was"
        return CandidateFactors({}, math.nan, None, reason)
    factors = {c: float(math.exp(np.median(v))) for c, v in sorted(centred.items())}
    groups = [seed, *centred.values(), *([children] if children else [])]
    tied = np.ptp(np.concatenate(groups)) == 0  # spans to the second can all agree
    pvalue = 1.0 if tied else float(scipy.stats.kruskal(*groups).pvalue)
    said = [f"candidate {c} x{f:.2f}" for c, f in factors.items()]
    proposals = [math.exp(c) for c in children] or list(factors.values())
    if children:
        said.append(f"{len(children)} rejected children x{np.median(proposals):.2f} (median)")
    test = f"Kruskal-Wallis p={pvalue:.2g}, {len(alone) + len(children)} spans"
    measured = f"rollouts over the seed's: {', '.join(said)} ({test})"
    shown = [*factors.values(), *([float(np.median(proposals))] if children else [])]
    if pvalue >= ALPHA or max(abs(f - 1) for f in shown) <= DIFFERS:
        why = f"{measured}: not kept, every candidate's taken as the seed's"
        return CandidateFactors(factors, pvalue, None, why)
    chosen = PromptLengths(1.0, tuple(proposals))
    whose = "the rejected children's" if children else "these"
    why = (
        f"{measured}: kept as [prompt], the latency fitted the seed's and each proposal's "
        f"factor drawn from {whose} (no token counts: exponent 1)"
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
    latency, _ = fit_untimed_latency(
        table, 0, np.empty(0), np.empty(0), servers=None, slowdown=0.0, choice="auto", notes=notes
    )
    return StageLatency(source, tuple(spans), latency, candidates, tuple(notes))


def log_stage_spans(run: PastRun, log: GepaLog) -> MarkedSpans:
    """The stages DSPy's log lines mark (docs/calibration.md); none without their times."""
    if not log.timed:
        return MarkedSpans([])
    by_iteration: dict[int | None, list] = {}
    for line in log.lines:
        if line.time is not None:
            by_iteration.setdefault(line.iteration, []).append(line)
    first = next(ln.time for ln in log.lines if ln.time is not None)
    rollouts: list[StageSpan] = []
    reflections: list[float] = []
    proposals: list[ProposalSpan] = []
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
        judged = rejected if rejected is not None else _first(lines, "Accepted candidate")
        if judged is None or not record.tasks[0].judged:
            continue
        child_rollouts = len(record.tasks[0].minibatch)
        proposals.append(ProposalSpan(i, (judged - selected).total_seconds(), child_rollouts))
        if rejected is not None:  # a rejected child's minibatch: its own span
            child = (rejected - proposed[-1]).total_seconds()
            rollouts.append(StageSpan(i, "child_minibatch", child, child_rollouts))
    return MarkedSpans(
        [r for r in rollouts if r.span > 0],
        [r for r in reflections if r > 0],
        [p for p in proposals if p.span > 0],
        to_the_second=True,
    )


def _first(lines: list, start: str):
    return next((ln.time for ln in lines if ln.text.startswith(start)), None)


def coarse(seconds: list[float]) -> bool:
    """Whether spans timed to the second are too short to time anything by."""
    return not seconds or float(np.median(seconds)) < LOG_RESOLUTION_FACTOR


def fit_reflection_latency(
    marked: MarkedSpans, stages: StageLatency | None, workers: int, source: str
) -> ReflectionLatency | None:
    """The reflection latency, a lognormal, from the reflections the spans time: DSPy's
    log's as they are, else the proposals' spans each less its child's minibatch at its
    mean makespan under the rollout latency measured (None when neither can be fitted to)."""
    if marked.fit_reflections(marked.reflections):
        spans = f"{len(marked.reflections)} reflections' spans, to the second"
        return ReflectionLatency(
            source, spans, fit_latency("reflection", marked.reflections, "lognorm")
        )
    if stages is None or not marked.fit_reflections([p.span for p in marked.proposals]):
        return None
    rollout = stages.latency.chosen.params
    scale = rollout["scale"] * stages.candidates.proposal
    children = [
        scale * mean_makespan(p.child_rollouts, workers, rollout["s"]) for p in marked.proposals
    ]
    reflections = [p.span - child for p, child in zip(marked.proposals, children, strict=True)]
    shorter = sum(r <= 0 for r in reflections)  # spans a fast child's minibatch left short
    if len(reflections) - shorter < MIN_FIT_POINTS:  # too short to tell from the child's
        return None
    spans = (
        f"{len(reflections)} single tasks' reflections, each its span to the child's minibatch "
        f"score less that minibatch at its mean makespan ({np.mean(children):.3g} s)"
        + (f"; {shorter} at or below it set aside (the fit leans long)" if shorter else "")
    )
    return ReflectionLatency(source, spans, fit_latency("reflection", reflections, "lognorm"))


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
