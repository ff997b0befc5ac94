"""Many replicates of the simulator -> a prediction with an interval, per shape.

Replicate r always uses its own random stream (model.replicate_rng), so a
prediction is the same to the bit however its replicates are spread over
processes or machines (backends.py).

A scenario with parameter uncertainty runs replicate r with its draw r mod D,
so the interval spans the parameters and the run-to-run noise together; the
replicates of one draw are grouped to tell the two apart (Split), at no extra
simulation. The noise interval (the run-to-run spread averaged over the draws)
stands in for the point estimate's own, which would cost a second simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pxn.acceptance import Acceptance
from pxn.errors import PxnError
from pxn.run_summary import RunSummary
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import AnalyticPrediction, analytic
from pxn.sim.backends import Backend, LocalBackend, gather
from pxn.sim.model import simulate_budgets, simulate_once
from pxn.sim.workload import Cost, Work, estimate
from pxn.stats import PERCENTILES
from pxn.trace import MERGE_STAGES, STAGES

CHUNK = 25  # replicates per unit of work handed to a process
SINGLE = Shape(1, 1)  # every speedup's baseline
# Single's replicates when it is only the speed-ups' baseline (not asked for): its mean
# to a fraction of a percent, every draw once (as many as asked cost over half the time).
BASELINE_REPLICATES = 200
PROGRESS_POINTS = 60  # times at which a prediction's best score over time is summarised


@dataclass(frozen=True)
class Interval:
    """Mean and 5-95% interval over replicates."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        array = np.asarray(values, dtype=float)
        low, high = np.percentile(array, PERCENTILES)
        return cls(float(array.mean()), float(low), float(high))

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[float]]) -> list[Interval]:
        """Interval.of each row, the rows of one length: the same numbers, from one numpy
        call per figure (a grid of thousands of allocations spent seconds one by one)."""
        array = np.asarray(rows, dtype=float)
        lows, highs = np.percentile(array, PERCENTILES, axis=1).tolist()
        means = array.mean(axis=1).tolist()
        return [cls(*figures) for figures in zip(means, lows, highs, strict=True)]


@dataclass(frozen=True)
class Band:
    """A figure over time across replicates: its mean and 5-95% at each of `times`."""

    times: tuple[float, ...]  # seconds since the run started
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    @classmethod
    def of_progress(cls, runs: Sequence[RunSummary], points: int = PROGRESS_POINTS) -> Band:
        """The best validation score so far, from when every run has validated its seed
        to the latest run's end: a run holds its last value once it has ended."""
        start = max(r.progress[0][0] for r in runs)
        times = np.linspace(start, max(start, max(r.wall_clock for r in runs)), points)
        values = np.empty((len(runs), points))
        for i, run in enumerate(runs):
            at, best = zip(*run.progress, strict=True)
            values[i] = np.asarray(best)[np.searchsorted(at, times, side="right") - 1]
        low, high = np.percentile(values, PERCENTILES, axis=0)
        return cls(*(tuple(a.tolist()) for a in (times, values.mean(axis=0), low, high)))


@dataclass(frozen=True)
class Split:
    """How a figure's spread over replicates divides between parameters and noise.

    The law of total variance: the variance over replicates is the variance
    of the draws' own means (the parameters' part) plus the mean variance
    within a draw (run-to-run noise). Estimated as a one-way random-effects
    analysis of variance does: the spread of the draws' observed means also
    holds the noise of their few replicates, which is taken off (and the
    parameters' part floored at 0).
    """

    parameter_share: float  # of the variance, 0 to 1: what better calibration could remove
    noise: Interval  # the mean, with the 5-95% spread of run-to-run noise alone


@dataclass(frozen=True)
class Prediction:
    """What the simulator and the closed form predict for one shape on one scenario."""

    shape: Shape
    replicates: int
    wall_clock: Interval  # seconds; over parameters and noise together when there are draws
    iterations: Interval
    full_val_share: Interval
    metric_calls: Interval
    proposals: Interval
    accepted: Interval
    utilisation: Interval
    stage_time: dict[str, float]  # mean seconds per stage, plus "overhead"
    analytic: AnalyticPrediction  # at the point estimate
    # Single's over this shape's wall-clock: the mean is the ratio of the means, the
    # interval that of replicate r of single over replicate r of the shape (the same
    # parameter draw); None when single was not run.
    speedup: Interval | None
    analytic_single: float  # the closed form's T(1), the baseline of its speed-up
    dollars: Interval | None = None  # what a run costs; None when the scenario has no prices
    # Share of calls (metric calls + reflections) that waited for rate-limit capacity.
    throttled_share: Interval = Interval(0.0, 0.0, 0.0)
    rate_limited: bool = False  # the scenario has provider limits (throttled_share applies)
    # Parameter draws the replicates ran over (0: the point estimate alone), and
    # how the spread splits; a split is None without draws or when no draw ran twice.
    draws: int = 0
    wall_clock_split: Split | None = None
    dollars_split: Split | None = None
    notes: tuple[str, ...] = ()  # what the user should know about these figures, in words
    # The search's outcome (the quality model; None without it): the best mean
    # validation score a run ends with, and the chosen candidate's expected score on
    # fresh examples (what a held-out test set measures, without the selection's optimism).
    best_score: Interval | None = None
    test_score: Interval | None = None
    progress: Band | None = None  # the best validation score over time
    # Where the scenario loses proposals ([failures]; None where it loses none): the share
    # of iterations that judged no proposal (all their tasks skipped or lost), and of tasks
    # not skipped that were lost before gepa judged them.
    no_proposal_share: Interval | None = None
    failed_share: Interval | None = None


def simulate_replicates(scenario: Scenario, shape: Shape, replicates: range) -> list[RunSummary]:
    return [simulate_once(scenario, shape, r) for r in replicates]


def simulate_replicates_at(
    scenario: Scenario, shape: Shape, replicates: range, budgets: Sequence[int]
) -> list[tuple[RunSummary, ...]]:
    """Each replicate's summaries at `budgets` (in their order), one run each to the
    scenario's budget, the largest of them (model.simulate_budgets)."""
    return [simulate_budgets(scenario, shape, r, budgets) for r in replicates]


def split(values: Sequence[float], draws: int) -> Split | None:
    """The split of `values` (replicate r's at index r, run with draw r mod `draws`)."""
    y = np.asarray(values, dtype=float)
    if len(y) <= draws:  # every draw ran once: noise cannot be told from the parameters
        return None
    groups = [y[i::draws] for i in range(draws)]
    sizes = np.array([len(g) for g in groups], dtype=float)
    means = np.array([g.mean() for g in groups])
    within_df = len(y) - len(groups)
    residuals = np.concatenate(
        # Deviations from a draw's own mean are narrower than the noise by
        # sqrt((n - 1) / n): widened back, so their spread is the noise's.
        [(g - g.mean()) * np.sqrt(len(g) / (len(g) - 1)) for g in groups if len(g) > 1]
    )
    noise = float(np.sum([np.sum((g - g.mean()) ** 2) for g in groups])) / within_df
    between = 0.0
    mean = float(y.mean())
    if len(groups) > 1:
        spread_of_means = float(np.sum(sizes * (means - mean) ** 2)) / (len(groups) - 1)
        per_draw = (len(y) - float(np.sum(sizes**2)) / len(y)) / (len(groups) - 1)
        between = max(0.0, (spread_of_means - noise) / per_draw)
    total = between + noise
    low, high = np.percentile(residuals, PERCENTILES)
    return Split(
        parameter_share=between / total if total > 0 else 0.0,
        noise=Interval(mean, mean + float(low), mean + float(high)),
    )


def draw_notes(draws: int, replicates: int) -> tuple[str, ...]:
    """What to tell the user when the replicates are too few for the scenario's draws."""
    if draws == 0 or replicates >= 2 * draws:
        return ()
    enough = f"{2 * draws} replicates or more (a multiple of {draws}) give every draw two"
    if replicates < draws:
        return (
            f"{replicates} replicates ran only {replicates} of the scenario's {draws} parameter "
            "draws, one each: the interval leaves part of the parameters' uncertainty out, and "
            f"cannot tell it from run-to-run noise; {enough}",
        )
    if replicates == draws:
        return (
            f"{replicates} replicates ran each of the scenario's {draws} parameter draws once: "
            f"the interval spans them, but cannot tell their share from run-to-run noise; {enough}",
        )
    return (
        f"{replicates} replicates over {draws} parameter draws: some draws ran once, so the "
        f"split between parameters and run-to-run noise is rough; {enough}",
    )


def summarize_replicates(
    scenario: Scenario, shape: Shape, runs: list[RunSummary], single: list[RunSummary] | None
) -> Prediction:
    """The prediction from `runs`, replicate r's at index r; speed-up against `single`'s
    runs (None: no speed-up)."""
    wall = Interval.of([r.wall_clock for r in runs])
    dollars = [r.dollars for r in runs]
    priced = None not in dollars
    defined = 0 if scenario.uncertainty is None else len(scenario.uncertainty)
    draws = min(defined, len(runs))  # replicate r ran draw r mod D: the first R when R < D
    scored = scenario.quality is not None
    # The stages a run can enter: a merge's only where gepa can merge.
    stages = STAGES if scenario.merges else [s for s in STAGES if s not in MERGE_STAGES]
    return Prediction(
        shape=shape,
        replicates=len(runs),
        wall_clock=wall,
        iterations=Interval.of([r.iterations for r in runs]),
        # A run with no iteration (a budget spent on the seed) ran no full validation.
        full_val_share=Interval.of([r.full_val_share if r.iterations else 0.0 for r in runs]),
        metric_calls=Interval.of([r.metric_calls for r in runs]),
        proposals=Interval.of([r.proposals for r in runs]),
        accepted=Interval.of([r.accepted for r in runs]),
        utilisation=Interval.of([r.utilisation for r in runs]),
        stage_time={
            name: float(np.mean([r.stage_time[name] for r in runs]))
            for name in (*stages, "overhead")
        },
        analytic=analytic(scenario, shape, simulated_acceptance(scenario, runs)),
        speedup=None if single is None else speedup(single, runs),
        analytic_single=analytic(
            scenario, SINGLE, simulated_acceptance(scenario, single or runs)
        ).wall_clock,
        dollars=Interval.of(dollars) if priced else None,
        throttled_share=Interval.of(
            [r.throttled_calls / (r.metric_calls + r.proposals) for r in runs]
        ),
        rate_limited=scenario.rate_limits.limited,
        draws=draws,
        wall_clock_split=split([r.wall_clock for r in runs], draws) if draws else None,
        dollars_split=split(dollars, draws) if draws and priced else None,
        notes=draw_notes(defined, len(runs)) + optimizer_notes(scenario, shape),
        best_score=Interval.of([r.best_score for r in runs]) if scored else None,
        test_score=Interval.of([r.test_score for r in runs]) if scored else None,
        progress=Band.of_progress(runs) if scored else None,
        **(lost_shares(runs) if scenario.failures.any else {}),
    )


def lost_shares(runs: list[RunSummary]) -> dict[str, Interval]:
    """The shares of iterations without a proposal and of tasks lost (0 where undefined: a
    run with no iteration, or none of whose tasks gepa kept)."""

    return {
        name: Interval.of([v if np.isfinite(v := getattr(r, name)) else 0.0 for r in runs])
        for name in ("no_proposal_share", "failed_share")
    }


def optimizer_notes(scenario: Scenario, shape: Shape) -> tuple[str, ...]:
    """What the optimizer that runs the loop means for this shape, in its user's words."""
    if scenario.optimizer == "dspy.GEPA" and shape.k > 1:
        return (
            "dspy.GEPA proposes one reflection at a time: a wider shape adds reflections in "
            "sequence; faster reflections, not more workers or concurrency, shorten them",
        )
    return ()


def speedup(single: list[RunSummary], runs: list[RunSummary]) -> Interval:
    """Single's wall-clock over the shape's: the ratio of the means, and the 5-95% of
    replicate r's ratio, paired (each pair ran the same parameter draw)."""
    pairs = min(len(single), len(runs))
    ratios = [single[r].wall_clock / runs[r].wall_clock for r in range(pairs)]
    mean = float(np.mean([r.wall_clock for r in single]) / np.mean([r.wall_clock for r in runs]))
    low, high = np.percentile(ratios, PERCENTILES)
    return Interval(mean, float(low), float(high))


def simulated_acceptance(scenario: Scenario, runs: list[RunSummary]) -> Acceptance | None:
    """The closed form's acceptance a under the quality model: the share of the simulated
    runs' proposals accepted (None: the scenario's own rates)."""
    if scenario.quality is None:
        return None
    proposals = sum(r.proposals for r in runs)
    return Acceptance(sum(r.accepted for r in runs) / proposals if proposals else 0.0)


def check_sweep(shapes: Sequence[Shape], replicates: int, jobs: int) -> None:
    """Refuse a sweep that cannot give an answer, before any work starts."""
    if replicates < 2:
        raise PxnError(f"must be >= 2 to give an interval: got {replicates}", subject="replicates")
    if jobs < 1:
        raise PxnError(f"must be >= 1: got {jobs}", subject="jobs")
    if not shapes:
        raise PxnError("name at least one shape, like single,2x2", subject="shapes")


def simulate_shapes(
    scenario: Scenario,
    shapes: Sequence[Shape],
    replicates: int,
    jobs: int = 1,
    on_progress: Callable[[int], None] | None = None,
    backend: Backend | None = None,
    budgets: Sequence[int] | None = None,
) -> dict[Shape, list]:
    """Replicates 0 .. replicates-1 of every shape and of single, each shape's in order.

    Single (1x1) is simulated too when it is not asked for, every speedup's
    baseline: then as many replicates as replicates_of gives it. The work runs on
    `backend` (opened and closed by the caller), else on `jobs` local processes;
    the runs are the same to the bit. With `budgets` (the scenario's budget the
    largest), each replicate is one run read at every budget: a tuple of its
    summaries, one a budget in their order.
    """
    check_sweep(shapes, replicates, jobs)
    todo = replicates_of(scenario, shapes, replicates)
    at = () if budgets is None else (tuple(budgets),)
    units = [
        (scenario, shape, range(i, min(i + CHUNK, count)), *at)
        for shape, count in todo.items()
        for i in range(0, count, CHUNK)
    ]
    simulate = simulate_replicates if budgets is None else simulate_replicates_at

    def told(_: int, runs: list) -> None:
        if on_progress:
            on_progress(len(runs))

    results = gather(backend or LocalBackend(jobs), simulate, units, told)  # local: nothing to open
    by_shape: dict[Shape, list] = {shape: [] for shape in todo}
    for (_, shape, *_), runs in zip(units, results, strict=True):
        by_shape[shape].extend(runs)  # units of a shape are in replicate order
    return by_shape


def predictions_of(
    scenario: Scenario, shapes: Sequence[Shape], runs: dict[Shape, list[RunSummary]]
) -> list[Prediction]:
    """Each shape's prediction from simulate_shapes' runs."""
    return [summarize_replicates(scenario, s, runs[s], runs[SINGLE]) for s in shapes]


def sweep(
    scenario: Scenario, shapes: Sequence[Shape], replicates: int, **spread: Any
) -> list[Prediction]:
    """Predict every shape from simulate_shapes' runs, spread as it takes them (`jobs`,
    `backend`; `on_progress(n)` is told as each n replicates finish)."""
    runs = simulate_shapes(scenario, shapes, replicates, **spread)
    return predictions_of(scenario, shapes, runs)


def replicates_of(scenario: Scenario, shapes: Sequence[Shape], replicates: int) -> dict[Shape, int]:
    """How many replicates `sweep` runs of each shape: as asked, and single as the baseline."""
    counts = dict.fromkeys(shapes, replicates)
    if SINGLE not in counts:
        draws = 0 if scenario.uncertainty is None else len(scenario.uncertainty)
        counts[SINGLE] = min(replicates, max(BASELINE_REPLICATES, draws))
    return counts


def total_replicates(scenario: Scenario, shapes: Sequence[Shape], replicates: int) -> int:
    """How many replicates `sweep` will run in all."""
    return sum(replicates_of(scenario, shapes, replicates).values())


def sweep_work(scenario: Scenario, shapes: Sequence[Shape], replicates: int) -> Work:
    """What `sweep` will cost (workload.py), single included, timed on a few short replicates."""
    todo = replicates_of(scenario, shapes, replicates)
    return estimate(list((scenario, *item) for item in todo.items()), Cost.measured(scenario))
