"""The search's quality model from the scores the traces hold, inferred by simulation.

Each run's search figures (pxn.run_summary) become facts of the kind run summaries give,
and the summaries' inference (summaries/infer.py) fits the [quality] table to them, each
run simulated at its own setup and shape; the latencies are held fixed and the lost
proposals at the traces' shares. The seed's validation becomes `seed_validation` when
every trace measured it alike. Where runs accepted a proposal, the point is the medians
of the draws with headroom over the seed (ceiling above its score), as the runs had; the
draws keep the rest, since a search that changes nothing still accepts proposals on noisy
scores, and the next run may find nothing. The metric is read off
the scores: binary (0 or 1), graded (multiples of 1/L, L <= MAX_LEVELS) or continuous.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from pxn.calibrate.summaries.abc_smc import Generation
from pxn.calibrate.summaries.facts import (
    SCALES,
    SCORE_QUANTITIES,
    Fact,
    InferenceOptions,
    Run,
    Setup,
    Summaries,
)
from pxn.calibrate.summaries.infer import Inference, infer_from_summaries
from pxn.errors import PxnError
from pxn.failures import Failures
from pxn.quality import Quality
from pxn.run_summary import RunSummary, summarize
from pxn.shape import Shape
from pxn.sim.backends import Backend
from pxn.trace import Rollout, Validation
from pxn.trace_reading import Trace

MAX_LEVELS = 10  # a graded metric's most steps; finer scores are read as continuous
# What the trace figures are fitted from: test_score is no trace's (gepa never sees it).
TRACE_QUANTITIES = tuple(q for q in SCORE_QUANTITIES if q != "test_score")
# The latencies, held at these placeholders: no search figure depends on them.
FIXED_TIMES = {
    "rollout.scale": 1.0,
    "rollout.s": 0.5,
    "reflection.scale": 1.0,
    "reflection.s": 0.5,
}
# The shares that count events, and what they count over: such a share is known to half
# an event (1 task skipped in 21 is a run's 5% as much as its 4.8%).
COUNTED_OVER: dict[str, Callable[[RunSummary], int]] = {
    "acceptance": lambda summary: summary.proposals,
    "skip_share": lambda summary: summary.skipped + summary.proposals,
}
PARTICLES = 200
NO_FAILURES = Failures()
MAX_GENERATIONS = 12


def default_options(draws: int) -> InferenceOptions:
    """The inference's settings for a calibration's search (and a past run's latencies)."""
    return InferenceOptions(
        particles=PARTICLES, draws=max(draws, 1), max_generations=MAX_GENERATIONS
    )


@dataclass(frozen=True)
class QualityFit:
    """The [quality] table the scores support, and how it was inferred."""

    quality: Quality  # at the posterior's median
    inference: Inference
    draws: tuple[dict[str, float], ...]  # the posterior's, "quality.*" paths
    # Draws with no headroom over the seed (a ceiling at or below its score) left out of
    # the point's medians where a run accepted a proposal; the draws keep them.
    no_headroom: int = 0


def scored(traces: list[Trace]) -> bool:
    """Whether the traces hold what the quality model is fitted from: validations and scored
    minibatch rollouts."""
    return all(t.of(Validation) for t in traces) and any(
        r.score is not None for t in traces for r in t.of(Rollout)
    )


def metric_of(traces: list[Trace]) -> tuple[str, int]:
    """(metric, levels) as the scores show it."""
    scores = {r.score for t in traces for r in t.of(Rollout) if r.score is not None}
    if scores <= {0.0, 1.0}:
        return "binary", 1
    fractions = [Fraction(s).limit_denominator(MAX_LEVELS) for s in scores]
    if all(math.isclose(float(f), s, abs_tol=1e-9) for f, s in zip(fractions, scores, strict=True)):
        levels = math.lcm(*(f.denominator for f in fractions))
        if levels <= MAX_LEVELS:
            return "graded", max(levels, 2)
    return "continuous", 1


def trace_summaries(
    traces: list[Trace], options: InferenceOptions, failures: Failures = NO_FAILURES
) -> Summaries:
    """Each trace as a run of its own setup and shape, its search figures as facts; the
    proposals it loses at the `failures` the traces showed (a run that loses proposals
    searches less)."""
    metric, levels = metric_of(traces)
    runs: list[Run] = []
    facts: list[Fact] = []
    for index, trace in enumerate(traces):
        start = trace.run_start
        setup = Setup.of_trace(start, metric, levels)
        runs.append(Run(Shape.parse(start.shape), setup))
        summary = summarize(trace)
        for quantity in TRACE_QUANTITIES:
            value = getattr(summary, quantity)
            if value is None or not math.isfinite(value):
                continue
            if SCALES[quantity] == "logit":  # a share of 0 or 1 is read just inside
                value = min(max(value, 0.0), 1.0)
            label = f"{trace.path.parent.name or trace.path.name} {quantity.replace('_', ' ')}"
            precision = precision_of(quantity, summary, setup)
            said = f"{value:.3g}"
            facts.append(Fact(label, quantity, value, value, (index,), said, precision=precision))
    fixed = dict(FIXED_TIMES)
    if failures.any:
        fixed |= {f"failures.{name}": value for name, value in failures.to_dict().items()}
    return Summaries(traces[0].path, tuple(runs), tuple(facts), fixed, options)


def precision_of(quantity: str, summary: RunSummary, setup: Setup) -> float:
    """How exactly a trace knows a figure: a share of counted events to half an event; the
    validation gain, a mean of score differences on V examples, to half a grade of one
    example over the gains averaged; the rest exactly."""
    if quantity in COUNTED_OVER:
        return 0.5 / COUNTED_OVER[quantity](summary)
    if quantity == "val_gain" and setup.metric != "continuous" and summary.accepted:
        return 0.5 / (setup.valset_size * setup.levels * summary.accepted)
    return 0.0


def fit_quality(
    traces: list[Trace],
    draws: int,
    failures: Failures = NO_FAILURES,
    jobs: int = 1,
    on_generation: Callable[[Generation], None] | None = None,
    backend: Backend | None = None,
) -> QualityFit:
    """The posterior of the [quality] table given the traces' search figures (PxnError when
    the inference cannot reproduce them or does not converge)."""
    summaries = trace_summaries(traces, default_options(draws), failures)
    inference = infer_from_summaries(summaries, "quality", jobs, on_generation, backend)
    assert inference.scenario.quality is not None and inference.scenario.uncertainty is not None
    posterior = tuple(
        {path: value for path, value in draw.items() if path.startswith("quality.")}
        for draw in inference.scenario.uncertainty.draws
    )
    quality = replace(inference.scenario.quality, seed_validation=seed_validation(traces))
    accepted = sum(s.accepted + s.merges_accepted for s in map(summarize, traces))
    kept = tuple(d for d in posterior if improvable(d)) if accepted else posterior
    if len(kept) == len(posterior):
        return QualityFit(quality, inference, posterior)
    if not kept:
        raise PxnError(
            "every posterior draw puts the ceiling at or below the seed's score, yet the runs "
            "accepted proposals: the scores cannot tell what a proposal does (longer runs, or "
            "a metric with more levels, would)"
        )
    medians = {path: float(np.median([d[path] for d in kept])) for path in kept[0]}
    if not improvable(medians):  # each draw is, their medians need not be: keep the headroom
        headroom = np.median([d[CEILING] - d[SEED] for d in kept])
        medians[CEILING] = min(medians[SEED] + float(headroom), 1.0)
    point = replace(quality, **{path.partition(".")[2]: v for path, v in medians.items()})
    return QualityFit(point, inference, posterior, len(posterior) - len(kept))


SEED, CEILING = "quality.seed_score", "quality.ceiling"


def improvable(draw: dict[str, float]) -> bool:
    """Whether a draw lets a proposal improve on the seed: a ceiling above the seed's score
    (at or below it, no proposal changes the seed's quality)."""
    return draw[CEILING] > draw[SEED]


def seed_validation(traces: list[Trace]) -> tuple[float, ...]:
    """The seed's score on each validation example, when every trace measured the same
    ones (one valset, the seed evaluated alike); empty otherwise, or where a score is
    missing: runs on other examples must not start from these."""
    measured = {seed_scores(trace) for trace in traces}
    return measured.pop() if len(measured) == 1 else ()


def seed_scores(trace: Trace) -> tuple[float, ...]:
    """The seed's validation scores in the valset's order (recorders name an example
    val/i, the simulator val:i); empty where one is missing."""
    scores = {
        r.example.replace(":", "/"): r.score for r in trace.of(Rollout) if r.phase == "seed_val"
    }
    measured = [scores.get(f"val/{i}") for i in range(trace.run_start.valset_size)]
    return () if None in measured else tuple(measured)
