"""Real runs read at each budget, against a learning curve predicted from shorter runs.

A reading is one real run's best validation score at one budget: the run itself when it
was given that budget, else its prefix (budget_reading.py). A prediction is a row of
`pxn sweep --budgets ... --out DIR`'s sweep.csv: one shape at one budget, the best
validation score's mean and 5-95% over the replicates (parameter draws and run-to-run
noise together). The gain of the largest budget over the smallest is read from a second
sweep asked for those two budgets only: its best_gain columns at the larger are then
paired, replicate r's score at the one less its own at the other (the same run, read
twice), so its interval is what one run gains.

A run is inside an interval when it lies in it, ends included, as `pxn validate` counts;
validation scores move on a lattice (1/V), so an end is often hit exactly, and the count
strictly inside is given beside it.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SINGLE = "1x1"


def shape_name(shape: str) -> str:
    """A shape as sweep.csv names it: single for 1x1."""
    return "single" if shape == SINGLE else shape


@dataclass(frozen=True)
class Reading:
    """One real run's best validation score at one budget."""

    run: str  # its directory's name
    source: str  # which set of runs it belongs to
    shape: str  # PxN, 1x1 for single
    seed: int
    budget: int
    best_score: float
    metric_calls: int
    wall_clock: float  # seconds, to the top of the first iteration the budget cut


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float  # 5th percentile
    high: float  # 95th percentile

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def holds_strictly(self, value: float) -> bool:
        return self.low < value < self.high

    @property
    def width(self) -> float:
        return self.high - self.low


def predicted_scores(sweep_csv: Path) -> dict[tuple[str, int], Interval]:
    """(shape as sweep names it, budget) -> the best validation score's interval."""
    with sweep_csv.open() as f:
        return {
            (row["shape"], int(row["budget"])): Interval(
                float(row["best_score_mean"]),
                float(row["best_score_p5"]),
                float(row["best_score_p95"]),
            )
            for row in csv.DictReader(f)
        }


def predicted_gains(gain_csv: Path, budget: int) -> dict[str, Interval]:
    """shape -> the paired gain of the best validation score at `budget` over the budget
    before it in the sweep (a sweep of two budgets: over the first)."""
    with gain_csv.open() as f:
        return {
            row["shape"]: Interval(
                float(row["best_gain_mean"]),
                float(row["best_gain_p5"]),
                float(row["best_gain_p95"]),
            )
            for row in csv.DictReader(f)
            if int(row["budget"]) == budget
        }


@dataclass(frozen=True)
class ScoreRow:
    """One shape at one budget: the runs' best scores against the prediction."""

    shape: str
    budget: int
    runs: int
    measured_mean: float
    measured_sd: float
    predicted: Interval
    inside: int
    strictly_inside: int

    @property
    def error(self) -> float:
        """Predicted mean less the runs' mean."""
        return self.predicted.mean - self.measured_mean


def score_rows(
    readings: Sequence[Reading], predicted: dict[tuple[str, int], Interval]
) -> list[ScoreRow]:
    """A row per (shape, budget) the readings hold, in the readings' order of first sight."""
    cells: dict[tuple[str, int], list[float]] = {}
    for r in readings:
        cells.setdefault((r.shape, r.budget), []).append(r.best_score)
    rows = []
    for (shape, budget), scores in cells.items():
        interval = predicted[shape_name(shape), budget]
        rows.append(
            ScoreRow(
                shape=shape,
                budget=budget,
                runs=len(scores),
                measured_mean=statistics.mean(scores),
                measured_sd=statistics.stdev(scores) if len(scores) > 1 else math.nan,
                predicted=interval,
                inside=sum(interval.holds(s) for s in scores),
                strictly_inside=sum(interval.holds_strictly(s) for s in scores),
            )
        )
    return rows


@dataclass(frozen=True)
class GainRow:
    """One shape: what the runs gained from the smallest budget to the largest."""

    shape: str
    first: int
    last: int
    runs: int
    measured_mean: float
    measured_se: float  # the standard error of the runs' mean gain
    predicted_mean: float  # the curve's mean at the last budget less its mean at the first
    paired: Interval  # one run's gain, replicate by replicate
    inside: int  # runs whose own gain lies in `paired`

    @property
    def error(self) -> float:
        return self.predicted_mean - self.measured_mean


def gain_rows(
    readings: Sequence[Reading],
    predicted: dict[tuple[str, int], Interval],
    paired: dict[str, Interval],
    first: int,
    last: int,
) -> list[GainRow]:
    """Per shape, every run read at both `first` and `last`: its gain between them."""
    at = {(r.run, r.budget): r.best_score for r in readings}
    runs: dict[str, list[float]] = {}
    for r in readings:
        if r.budget == last and (r.run, first) in at:
            runs.setdefault(r.shape, []).append(r.best_score - at[r.run, first])
    rows = []
    for shape, gains in runs.items():
        name = shape_name(shape)
        interval = paired[name]
        rows.append(
            GainRow(
                shape=shape,
                first=first,
                last=last,
                runs=len(gains),
                measured_mean=statistics.mean(gains),
                measured_se=statistics.stdev(gains) / math.sqrt(len(gains))
                if len(gains) > 1
                else math.nan,
                predicted_mean=predicted[name, last].mean - predicted[name, first].mean,
                paired=interval,
                inside=sum(interval.holds(g) for g in gains),
            )
        )
    return rows


def coverage(rows: Sequence[ScoreRow]) -> tuple[int, int, int]:
    """(inside, strictly inside, runs) over the rows."""
    return (
        sum(r.inside for r in rows),
        sum(r.strictly_inside for r in rows),
        sum(r.runs for r in rows),
    )
