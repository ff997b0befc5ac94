"""Predict before paying: `simulate` one shape, `sweep` many, at one budget or along
learning curves (`sweep(budgets=...)`). Single is simulated too when not asked for:
it is every speedup's baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.api.report import Note, Report, Result
from pxn.api.running import (
    DEFAULT_JOBS,
    budgets_of,
    metered,
    proposal_warnings,
    scenario_of,
    shapes_of,
)
from pxn.budget import FEW_PROPOSALS
from pxn.errors import PxnError
from pxn.shape import Shape

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from pxn.api.running import ScenarioLike, ShapesLike, Spread
    from pxn.scenario import Scenario
    from pxn.sim.curves import Curve
    from pxn.sim.predict import Prediction

PAPER_SHAPES = "single,2x1,2x2,4x1,2x4,8x1,2x8,4x4,8x2"


@dataclass(frozen=True)
class SimulateResult(Result):
    """One shape predicted: wall-clock with its interval, iterations, stages, the closed form."""

    scenario: Scenario  # as simulated: the overrides applied
    prediction: Prediction
    warnings: tuple[str, ...] = ()  # a budget too small to search

    def report(self) -> Report:
        from pxn.api.prediction_report import predictions_report

        report = predictions_report(self.scenario, [self.prediction], stages=True)
        return with_warnings(report, self.warnings)

    def figure(self) -> Figure:
        """The shape's wall-clock band, closed form and bound, as `sweep` draws each shape."""
        from pxn.api.plots import sweep_figure

        return sweep_figure(self.scenario, [self.prediction])

    def write_trace(self, path: str | Path) -> Path:
        """Replicate 0 as a trace (JSONL) at a new path, in place whole or not at all."""
        from pxn.sim.model import simulate_once
        from pxn.trace import TraceWriter

        path = Path(path)
        refuse_existing_trace(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        try:
            with TraceWriter(partial) as writer:
                simulate_once(self.scenario, self.prediction.shape, 0, writer)
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
        return path


@dataclass(frozen=True)
class SweepResult(Result):
    """Many shapes predicted, in the order asked; with several budgets, each shape's learning
    curve (`curves`), the predictions then being those at the largest budget."""

    scenario: Scenario  # as simulated: the overrides applied (the largest budget of curves)
    predictions: tuple[Prediction, ...]
    curves: tuple[Curve, ...] = ()
    deadline: float | None = None  # seconds: drawn on the curves' figure, marked in their table
    max_dollars: float | None = None
    warnings: tuple[str, ...] = ()  # budgets too small to search
    notes: tuple[str, ...] = ()  # DSPy's levels outside the budgets asked

    def report(self) -> Report:
        from pxn.api.curves_report import curves_report
        from pxn.api.prediction_report import predictions_report

        if self.curves:
            report = curves_report(
                self.scenario, list(self.curves), self.deadline, self.max_dollars, self.notes
            )
        else:
            report = predictions_report(self.scenario, list(self.predictions))
        return with_warnings(report, self.warnings)

    def figure(self) -> Figure:
        """Predicted wall-clock per shape with its interval, the closed form, and speedup."""
        from pxn.api.plots import sweep_figure

        return sweep_figure(self.scenario, self.predictions)

    def curves_figure(self) -> Figure:
        """Expected test score against dollars and against hours, a band per shape, the
        deadline and cap drawn (the quality model's; needs curves)."""
        from pxn.api.plots import curves_figure

        if not self.curves or self.scenario.quality is None:
            raise PxnError(
                "learning curves of the score need several budgets and a [quality] model"
            )
        return curves_figure(self.scenario, self.curves, self.deadline, self.max_dollars)

    def progress_figure(self, measured: Sequence[str | Path] = ()) -> Figure:
        """The best validation score against wall-clock per shape (the quality model's),
        with `measured` runs (trace files or run directories) overlaid."""
        from pxn.api.plots import progress_figure
        from pxn.run_summary import summarize
        from pxn.trace_reading import load_traces

        if self.scenario.quality is None:
            raise PxnError(
                "the scenario has no [quality] model: its runs have no score to show over time"
            )
        runs = [] if not measured else load_traces(list(measured)).traces
        overlaid = [(Shape.parse(t.run_start.shape).label, summarize(t)) for t in runs]
        return progress_figure(self.scenario, self.predictions, overlaid)

    def figures(self) -> dict[str, Callable[[], Figure]]:
        """What `sweep --out` draws: sweep.png, and progress.png under the quality model
        (and curves.png, with several budgets)."""
        drawn = {"sweep.png": self.figure}
        if self.scenario.quality is not None:
            drawn["progress.png"] = self.progress_figure
            if self.curves:
                drawn["curves.png"] = self.curves_figure
        return drawn


def with_warnings(report: Report, warnings: Sequence[str]) -> Report:
    """The report with the budgets' warnings: after its tables, and in its JSON."""
    if warnings:
        report.shown += [Note(w, label="warning") for w in warnings]
        report.document = report.document | {"warnings": list(warnings)}
    return report


def refuse_existing_trace(path: Path) -> None:
    """A trace is never written over: a new path each time."""
    if path.exists():
        raise PxnError(f"{path} already exists; choose a new path", subject="trace")


def simulate(
    scenario: ScenarioLike,
    *,
    shape: Shape | str = "single",
    reps: int = 200,
    seed: int | None = None,
    jobs: int = 1,
    workers: int | None = None,
    budget: int | str | None = None,
    predictors: int | None = None,
    minibatch: int | None = None,
    min_proposals: int = FEW_PROPOSALS,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> SimulateResult:
    """Predict one shape (P x N, e.g. "2x2", or "single") of `scenario` (a Scenario, a
    preset's name or a TOML path) over `reps` replicates. The other keywords are `pxn
    simulate`'s flags, which replace the scenario's own where given (its --help says each);
    `progress` counts the replicates on stderr."""
    from pxn.sim.predict import check_sweep

    the_shape = shape if isinstance(shape, Shape) else Shape.parse(shape)
    the_scenario = scenario_of(scenario, seed, workers, budget, predictors, minibatch)
    warnings = proposal_warnings(
        the_scenario, [the_scenario.budget], [the_shape], min_proposals, progress
    )
    check_sweep([the_shape], reps, jobs)  # after the warnings; before the progress bar
    [prediction] = run_sweep(the_scenario, [the_shape], reps, (jobs, backend, address, progress))
    return SimulateResult(the_scenario, prediction, warnings)


def sweep(
    scenario: ScenarioLike,
    *,
    shapes: ShapesLike = PAPER_SHAPES,
    reps: int = 200,
    seed: int | None = None,
    jobs: int = DEFAULT_JOBS,
    workers: int | None = None,
    budget: int | str | None = None,
    budgets: str | Sequence[int | str] | None = None,
    predictors: int | None = None,
    minibatch: int | None = None,
    deadline: str | float | None = None,
    max_dollars: float | None = None,
    min_proposals: int = FEW_PROPOSALS,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> SweepResult:
    """Predict many shapes ("single,2x2" or a list) over `reps` replicates each; with several
    `budgets` (text as `pxn sweep --budgets` takes it, or a list), each shape's learning
    curve, one simulation a replicate read at every budget. The other keywords are `pxn
    sweep`'s flags (its --help says each), and `simulate`'s."""
    from pxn.durations import parse_duration
    from pxn.sim.predict import check_sweep

    if budget is not None and budgets is not None:
        raise PxnError("give one budget, or a curve's budgets, not both", subject="budgets")
    the_shapes = shapes_of(shapes)
    the_scenario = scenario_of(scenario, seed, workers, budget, predictors, minibatch)
    seconds = parse_duration(deadline, "deadline") if isinstance(deadline, str) else deadline
    for name, value in (("deadline", seconds), ("dollar cap", max_dollars)):
        if value is not None and value <= 0:
            raise PxnError(f"must be positive: got {value:g}", subject=name)
    spread = (jobs, backend, address, progress)
    if budgets is not None:
        try:
            asked = budgets_of(the_scenario, budgets, predictors)
        except PxnError as error:  # the flag is --budgets here
            raise error.naming("budgets") if error.subject == "budget" else error from None
        if len(asked.names) > 1:
            check_sweep(the_shapes, reps, jobs)  # refused before the budgets are warned of
            budgets = list(asked.names)
            warnings = proposal_warnings(the_scenario, budgets, the_shapes, min_proposals, progress)
            curves = tuple(run_sweep(the_scenario, the_shapes, reps, spread, asked.names))
            last = tuple(curve.last.prediction for curve in curves)
            longest = the_scenario.replace(budget=max(budgets))
            return SweepResult(longest, last, curves, seconds, max_dollars, warnings, asked.notes)
        the_scenario = the_scenario.replace(budget=asked.values[0])
    warnings = proposal_warnings(
        the_scenario, [the_scenario.budget], the_shapes, min_proposals, progress
    )
    check_sweep(the_shapes, reps, jobs)  # after the warnings; before the progress bar
    predictions = run_sweep(the_scenario, the_shapes, reps, spread)
    return SweepResult(the_scenario, tuple(predictions), (), seconds, max_dollars, warnings)


def run_sweep(
    scenario: Scenario,
    shapes: list[Shape],
    reps: int,
    spread: Spread,
    names: dict[int, str] | None = None,
) -> list:
    """Every shape's prediction, or with budgets (`names`: B -> as given) its learning curve
    over them, one run a replicate read at every budget; the replicates counted on stderr
    when asked (the caller has refused a sweep that cannot give an answer: check_sweep)."""
    from pxn.sim.curves import sweep_curves
    from pxn.sim.predict import sweep, sweep_work, total_replicates

    longest = scenario if names is None else scenario.replace(budget=max(names))
    total = total_replicates(longest, shapes, reps)
    work = partial(sweep_work, longest, shapes, reps)
    budget = "a smaller budget" if names is None else "smaller budgets"
    smaller = f"ask for fewer replicates or {budget}, or fewer or smaller shapes"
    with metered(total, work, "this sweep", smaller, spread) as (meter, backend):
        how = {"jobs": spread[0], "on_progress": meter.advance, "backend": backend}
        if names is None:
            return sweep(scenario, shapes, reps, **how)
        return sweep_curves(scenario, shapes, reps, names, **how)
