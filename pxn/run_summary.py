"""A run's summary from its trace, measured or simulated alike: time per stage,
proposals and their fates, merges, dollars, and the search's scores."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pxn.shape import Shape
from pxn.trace import (
    LOST_REASONS,
    SKIPPED_REASONS,
    STAGES,
    Decision,
    Iteration,
    Merge,
    NoProposal,
    Reflection,
    Rollout,
    Stage,
    Validation,
)
from pxn.trace_reading import Trace


@dataclass(frozen=True)
class SearchFigures:
    """What a run's scores say about its search, beyond its best score (NaN: not seen).

    val_gain: a new candidate's mean validation score less its parent's, on average;
    example_spread: the sd over validation examples of their mean score over the candidates
    (how examples differ in difficulty; not seen when the seed's validation is a mean
    alone, as in gepa's log: without the seed it is another figure); repeat_agreement:
    the share of a parent's repeated evaluations on one train example that scored as the
    one before (evaluation noise).
    """

    val_gain: float
    example_spread: float
    repeat_agreement: float


def example_spread(scores: Sequence[Sequence[float]]) -> float:
    """The sd over examples of their mean score over candidates (a row per candidate)."""
    if len(scores) < 1 or not len(scores[0]):
        return math.nan
    return float(np.std(np.mean(np.vstack(scores), axis=0)))


class Repeats:
    """Counts a parent's repeated evaluations on one example, and those that agreed."""

    def __init__(self) -> None:
        self.last: dict[tuple[Hashable, Hashable], float] = {}
        self.repeated = 0
        self.agreed = 0

    def add(self, candidate: Hashable, example: Hashable, score: float) -> None:
        before = self.last.get((candidate, example))
        if before is not None:
            self.repeated += 1
            self.agreed += before == score
        self.last[candidate, example] = score

    @property
    def agreement(self) -> float:
        return self.agreed / self.repeated if self.repeated else math.nan


@dataclass(frozen=True)
class RunSummary:
    """The figures of one run, measured or simulated."""

    wall_clock: float  # seconds
    iterations: int
    full_val_iterations: int  # iterations that ran full validation
    proposals: int
    accepted: int
    metric_calls: int
    stage_time: dict[str, float]  # seconds per stage name, plus "overhead"
    utilisation: float  # busy worker-seconds / (W * wall-clock)
    dollars: float | None = None  # what the calls cost; None when nothing priced them
    throttled_calls: int = 0  # calls that waited for rate-limit capacity (simulated)
    skipped: int = 0  # proposals not made: their parent was perfect on the minibatch
    # Tasks lost before gepa judged a proposal (pxn.failures), and the iterations (merges
    # aside) that judged no proposal at all.
    failed: int = 0
    no_proposal_iterations: int = 0
    # gepa's merges (use_merge): attempted (each an iteration without proposals),
    # and accepted (each a new candidate besides `accepted`).
    merges: int = 0
    merges_accepted: int = 0
    # The search, where scores are known: the seed's and the best mean validation score,
    # the chosen candidate's expected score (simulated only), (seconds, best score) each
    # time it rose, and what the quality model is calibrated from.
    seed_score: float | None = None
    best_score: float | None = None
    test_score: float | None = None
    progress: tuple[tuple[float, float], ...] = ()
    figures: SearchFigures | None = None

    @property
    def full_val_share(self) -> float:
        return self.full_val_iterations / self.iterations if self.iterations else math.nan

    @property
    def acceptance(self) -> float:
        """The share of proposals that joined the pool."""
        return self.accepted / self.proposals if self.proposals else math.nan

    @property
    def skip_share(self) -> float:
        """The share of tasks skipped because their parent was perfect on the minibatch."""
        tasks = self.skipped + self.proposals
        return self.skipped / tasks if tasks else math.nan

    @property
    def failed_share(self) -> float:
        """The share of tasks gepa did not skip that were lost before it judged them."""
        tasks = self.failed + self.proposals
        return self.failed / tasks if tasks else math.nan

    @property
    def no_proposal_share(self) -> float:
        """The share of iterations that judged no proposal (merges count as proposals)."""
        return self.no_proposal_iterations / self.iterations if self.iterations else math.nan

    @property
    def val_gain(self) -> float:
        return math.nan if self.figures is None else self.figures.val_gain

    @property
    def example_spread(self) -> float:
        return math.nan if self.figures is None else self.figures.example_spread

    @property
    def repeat_agreement(self) -> float:
        return math.nan if self.figures is None else self.figures.repeat_agreement


def summarize(trace: Trace) -> RunSummary:
    """Summarize a trace the same way whether it was measured or simulated."""
    end = trace.run_end
    wall_clock = end.end if end else max(e.end for e in trace.events)
    stages = trace.live(Stage)
    stage_time = {name: 0.0 for name in STAGES}
    for stage in stages:
        stage_time[stage.name] += stage.duration
    stage_time["overhead"] = wall_clock - sum(stage_time.values())
    decisions = trace.live(Decision)
    merges = trace.live(Merge)
    rollouts = trace.live(Rollout)
    busy = sum(r.duration for r in rollouts)
    costs = [c.cost for c in (*rollouts, *trace.live(Reflection)) if c.cost is not None]
    workers = trace.run_start.workers
    validations = trace.live(Validation)
    progress = best_score_progress(validations)
    iterations = trace.live(Iteration)
    lost = LostTasks.of(trace, iterations, decisions, merges)
    return RunSummary(
        wall_clock=wall_clock,
        iterations=len(iterations),
        full_val_iterations=len({s.iteration for s in stages if s.name == "full_val"}),
        proposals=len(decisions),
        accepted=sum(d.accepted for d in decisions),
        metric_calls=len(rollouts),
        stage_time=stage_time,
        utilisation=busy / (workers * wall_clock) if workers and wall_clock > 0 else 0.0,
        dollars=sum(costs) if costs else None,
        skipped=lost.skipped,
        failed=lost.failed,
        no_proposal_iterations=lost.no_proposal_iterations,
        merges=len(merges),
        merges_accepted=sum(m.accepted for m in merges),
        seed_score=next((v.score for v in validations if v.iteration == 0), None),
        best_score=progress[-1][1] if progress else None,
        progress=progress,
        figures=search_figures(validations, decisions, rollouts) if progress else None,
    )


@dataclass(frozen=True)
class LostTasks:
    """A run's tasks that gepa judged no proposal of: skipped, or lost (pxn.failures)."""

    skipped: int
    failed: int
    no_proposal_iterations: int

    @classmethod
    def of(
        cls,
        trace: Trace,
        iterations: list[Iteration],
        decisions: list[Decision],
        merges: list[Merge],
    ) -> LostTasks:
        """From the no_proposal events (schema 3); an older trace's lost tasks are those that
        reached a reflection and no decision, the rest of its k tasks an iteration skipped."""
        # A merge takes its iteration's place: that iteration proposes nothing.
        reflective = {i.iteration for i in iterations} - {m.iteration for m in merges}
        idle = len(reflective - {d.iteration for d in decisions})
        if trace.run_start.schema >= 3:
            reasons = Counter(e.reason for e in trace.live(NoProposal) if e.iteration in reflective)
            return cls(
                skipped=sum(reasons[r] for r in SKIPPED_REASONS),
                failed=sum(reasons[r] for r in LOST_REASONS),
                no_proposal_iterations=idle,
            )
        decided = {(d.iteration, d.proposal) for d in decisions}
        reflected = {(r.iteration, r.proposal) for r in trace.live(Reflection)}
        failed = len({task for task in reflected - decided if task[0] in reflective})
        k = Shape.parse(trace.run_start.shape).k
        skipped = max(0, k * len(reflective) - len(decisions) - failed)
        return cls(skipped=skipped, failed=failed, no_proposal_iterations=idle)


def search_figures(
    validations: list[Validation], decisions: list[Decision], rollouts: list[Rollout]
) -> SearchFigures:
    """A recorded run's SearchFigures, from its validations, decisions and scored rollouts."""
    val_of = {v.candidate: v.score for v in validations}
    gains = [
        val_of[d.candidate] - val_of[d.parent]
        for d in decisions
        if d.accepted and d.candidate in val_of and d.parent in val_of
    ]
    by_candidate: dict[str, dict[str, float]] = {}
    repeats = Repeats()
    for r in rollouts:
        if r.score is None:
            continue
        if r.phase in ("seed_val", "full_val"):
            by_candidate.setdefault(r.candidate, {})[r.example] = r.score
        elif r.phase == "parent_minibatch":
            repeats.add(r.candidate, r.example, r.score)
    examples = sorted(set.intersection(*map(set, by_candidate.values()))) if by_candidate else []
    seed_unscored = any(v.iteration == 0 for v in validations) and not any(
        r.phase == "seed_val" and r.score is not None for r in rollouts
    )
    spread = example_spread([[v[e] for e in examples] for v in by_candidate.values()])
    return SearchFigures(
        val_gain=sum(gains) / len(gains) if gains else math.nan,
        example_spread=math.nan if seed_unscored else spread,
        repeat_agreement=repeats.agreement,
    )


def best_score_progress(validations: Sequence[Validation]) -> tuple[tuple[float, float], ...]:
    """(time, best mean validation score so far) at each validation that raised it."""
    progress: list[tuple[float, float]] = []
    for event in sorted(validations, key=lambda e: e.end):
        if not progress or event.score > progress[-1][1]:
            progress.append((event.end, event.score))
    return tuple(progress)
