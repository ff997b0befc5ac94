"""Run summaries as inference reads them: the facts, the runs they read, the setup.

Each reported figure is a `Fact`: a quantity of one run, or of a whole sweep
of shapes, with a reported value or a range [low, high] (a range costs
nothing anywhere inside it). reading.py reads them from a file, in the formats
of this package's docstring (`pydoc pxn.calibrate.summaries`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pxn.calibrate.summaries.priors import Prior
from pxn.prompt_lengths import PromptLengths
from pxn.run_summary import RunSummary
from pxn.scenario import CalibratedOn
from pxn.shape import Shape
from pxn.trace import RunStart

# Figures of the search: a fact of one of them has the quality model inferred.
# best_score is the best mean validation score (selected, so optimistic); test_score
# the chosen candidate's score on a held-out test set (with test_examples: how many).
SCORE_QUANTITIES = (
    "seed_score",
    "best_score",
    "test_score",
    "acceptance",
    "skip_share",
    "val_gain",
    "example_spread",
    "repeat_agreement",
)
RUN_QUANTITIES = (
    "iterations",
    "metric_calls",
    "full_val_iterations",
    "full_val_share",
    "accepted",
    "dollars",
    *SCORE_QUANTITIES,
)
# The scale a quantity's misfit is measured on: ratios for sizes, odds for a
# share, ratios of one more for counts that can be zero.
SCALES = {
    **dict.fromkeys(("wall_clock", "iterations", "metric_calls", "dollars"), "log"),
    **dict.fromkeys(
        ("most_speedup", "fastest_speedup", "cheapest_dollars", "dearest_dollars"), "log"
    ),
    **dict.fromkeys(("full_val_iterations", "accepted"), "log1p"),
    **dict.fromkeys(("full_val_share", "acceptance", "skip_share", "repeat_agreement"), "logit"),
    **dict.fromkeys(("seed_score", "best_score", "test_score"), "logit"),
    **dict.fromkeys(("val_gain", "example_spread"), "linear"),
}


@dataclass(frozen=True)
class Setup:
    """What a run was given: the scenario's fixed part."""

    budget: int
    valset_size: int
    workers: int
    trainset_size: int
    minibatch: int = 3
    reflection_concurrency: int = 10
    task_model: str = ""
    reflection_model: str = ""
    metric: str = "binary"  # what a score is, where the quality model is inferred
    levels: int = 1
    prompt: PromptLengths | None = None  # the candidates' latency factors, where measured

    @property
    def priced(self) -> bool:
        return bool(self.task_model)

    @classmethod
    def of_trace(cls, start: RunStart, metric: str = "binary", levels: int = 1) -> Setup:
        """What a traced run was given, from its run_start event."""
        return cls(
            budget=start.budget,
            valset_size=start.valset_size,
            workers=start.workers,
            trainset_size=start.trainset_size,
            minibatch=start.minibatch,
            reflection_concurrency=start.reflection_concurrency,
            metric=metric,
            levels=levels,
        )


@dataclass(frozen=True)
class Run:
    shape: Shape
    setup: Setup


@dataclass(frozen=True)
class Fact:
    """One reported figure: `quantity` of the runs at `runs`, in [low, high].

    A point value has low == high. `runs` is one run's index, or for a sweep
    statement the sweep's runs with single first.
    """

    label: str
    quantity: str
    low: float
    high: float
    runs: tuple[int, ...]
    reported: str  # as the file said it, for reports
    unit: str = ""  # what a report shows its figures in ("h", "min", "s"; "" for counts)
    per_unit: float = 1.0  # the figure's natural units (seconds) per shown unit
    precision: float = 0.0  # half a unit in the last digit written, in natural units
    examples: int = 0  # a test score's test set: its sampling is part of the figure

    def shown(self, value: float) -> str:
        """A figure of this fact as a person reads it."""
        if "dollars" in self.quantity:
            return f"${value:.3g}"
        if self.quantity in ("full_val_share", "acceptance", "skip_share"):
            return f"{value:.0%}"
        if self.quantity in SCORE_QUANTITIES:
            return f"{value:.3f}"
        if "speedup" in self.quantity:
            return f"{value:.2f}x"
        return f"{value / self.per_unit:.3g}" + (f" {self.unit}" if self.unit else "")

    @property
    def scale(self) -> str:
        return SCALES[self.quantity]

    @property
    def ranged(self) -> bool:
        return self.low != self.high

    def measure(self, summaries: list[RunSummary], rng: np.random.Generator | None = None) -> float:
        """This figure in simulated runs (one summary per run of the Summaries); a test
        score on `examples` examples is drawn from them with `rng`, as a test set's is."""
        if self.quantity == "wall_clock":
            return summaries[self.runs[0]].wall_clock
        if self.quantity in RUN_QUANTITIES:
            value = getattr(summaries[self.runs[0]], self.quantity)
            if value is None:
                return math.nan
            if self.quantity == "test_score" and self.examples and rng is not None:
                return float(rng.binomial(self.examples, value) / self.examples)
            return float(value)
        sweep = [summaries[i] for i in self.runs]
        if self.quantity in ("cheapest_dollars", "dearest_dollars"):
            dollars = [s.dollars if s.dollars is not None else math.nan for s in sweep]
            return min(dollars) if self.quantity == "cheapest_dollars" else max(dollars)
        # Each batched run's speedup: single's wall-clock over its own.
        batched = sorted((sweep[0].wall_clock / s.wall_clock for s in sweep[1:]), reverse=True)
        if self.quantity == "fastest_speedup":
            return batched[0]
        return batched[len(batched) // 2]  # most_speedup: more than half are at least this


@dataclass(frozen=True)
class InferenceOptions:
    seed: int = 0
    particles: int = 400
    # Posterior draws written as [uncertainty]: a prediction's default 200 replicates
    # then run each draw twice, which tells the parameters' share of its spread.
    draws: int = 100
    min_acceptance: float = 0.05
    max_generations: int = 20


@dataclass(frozen=True)
class Summaries:
    path: Path
    runs: tuple[Run, ...]  # every run the facts read, simulated once per parameter setting
    facts: tuple[Fact, ...]
    priors: dict[str, Prior | float] = field(default_factory=dict)
    options: InferenceOptions = InferenceOptions()

    @property
    def setup(self) -> Setup:
        """The setup a written scenario takes: the first run's."""
        return self.runs[0].setup

    @property
    def has_dollars(self) -> bool:
        return any("dollars" in f.quantity for f in self.facts)

    @property
    def scored(self) -> bool:
        """Whether a fact is a score: then the quality model is inferred."""
        return any(f.quantity in SCORE_QUANTITIES for f in self.facts)

    def calibrated_on(self) -> CalibratedOn | None:
        """How much run the facts saw, as [calibrated_on] records it: the runs, the most
        metric calls one reported (else its budget) and the most proposals, a reported
        count of iterations times its shape's k. None when no run reports iterations."""

        def reported(quantity: str, run: int) -> float | None:
            own = [f.high for f in self.facts if f.quantity == quantity and f.runs == (run,)]
            return max(own, default=None)

        proposals = [
            iterations * r.shape.k
            for i, r in enumerate(self.runs)
            if (iterations := reported("iterations", i)) is not None
        ]
        if not proposals:
            return None
        calls = [reported("metric_calls", i) or r.setup.budget for i, r in enumerate(self.runs)]
        return CalibratedOn(len(self.runs), math.floor(max(calls)), math.floor(max(proposals)))
