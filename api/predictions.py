"""Predict before paying: `simulate` one shape, `sweep` many.

Each shape's replicates run the simulator (pxn.sim.predict), on local
processes (`jobs`) or a Ray cluster (`backend="ray"`, `address`); replicate r
always draws from its own stream, so the same seed gives the same prediction
to the bit however the work is spread. Single (1x1) is simulated too when it
is not asked for: it is every speedup's baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.api.results import Result
from pxn.api.running import DEFAULT_JOBS, run_sweep, scenario_of, shapes_of
from pxn.errors import PxnError
from pxn.shape import Shape

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from pxn.api.report import Report
    from pxn.api.running import ScenarioLike, ShapesLike
    from pxn.scenario import Scenario
    from pxn.sim.predict import Prediction

PAPER_SHAPES = "single,2x1,2x2,4x1,2x4,8x1,2x8,4x4,8x2"


@dataclass(frozen=True)
class SimulateResult(Result):
    """One shape predicted: wall-clock with its interval, iterations, stages, the closed form."""

    scenario: Scenario  # as simulated: the overrides applied
    prediction: Prediction

    def report(self) -> Report:
        from pxn.api.prediction_report import predictions_report

        return predictions_report(self.scenario, [self.prediction], stages=True)

    def records(self) -> Sequence[Prediction]:
        return [self.prediction]

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
    """Many shapes predicted, in the order asked."""

    scenario: Scenario  # as simulated: the overrides applied
    predictions: tuple[Prediction, ...]

    def report(self) -> Report:
        from pxn.api.prediction_report import predictions_report

        return predictions_report(self.scenario, list(self.predictions))

    def records(self) -> Sequence[Prediction]:
        return self.predictions

    def figure(self) -> Figure:
        """Predicted wall-clock per shape with its interval, the closed form, and speedup."""
        from pxn.api.plots import sweep_figure

        return sweep_figure(self.scenario, self.predictions)

    def progress_figure(self, measured: Sequence[str | Path] = ()) -> Figure:
        """The best validation score against wall-clock per shape (the quality model's),
        with `measured` runs (trace files or run directories) overlaid."""
        from pxn.api.plots import progress_figure
        from pxn.trace import load_traces, summarize

        if self.scenario.quality is None:
            raise PxnError(
                "the scenario has no [quality] model: its runs have no score to show over time"
            )
        runs = [] if not measured else load_traces(list(measured)).traces
        overlaid = [(Shape.parse(t.run_start.shape).label, summarize(t)) for t in runs]
        return progress_figure(self.scenario, self.predictions, overlaid)

    def figures(self) -> dict[str, Callable[[], Figure]]:
        """What `sweep --out` draws: sweep.png, and progress.png under the quality model."""
        drawn = {"sweep.png": self.figure}
        if self.scenario.quality is not None:
            drawn["progress.png"] = self.progress_figure
        return drawn


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
    predictors: int = 1,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> SimulateResult:
    """Predict one shape (P x N, e.g. "2x2", or "single") over `reps` replicates.

    `scenario`: a Scenario, a preset's name or a TOML path; `seed`, `workers`
    (W) and `budget` (B) replace its own when given, B in metric calls or as
    dspy.GEPA takes it ("auto:light", "full-evals:3"; `predictors`: the DSPy
    program's, for an auto budget). `jobs`: local processes;
    `backend` "ray" spreads the replicates over Ray (`address`: a running
    head's HOST:PORT). `progress`: count the replicates on stderr.
    """
    the_shape = shape if isinstance(shape, Shape) else Shape.parse(shape)
    the_scenario = scenario_of(scenario, seed, workers, budget, predictors)
    [prediction] = run_sweep(the_scenario, [the_shape], reps, jobs, backend, address, progress)
    return SimulateResult(the_scenario, prediction)


def sweep(
    scenario: ScenarioLike,
    *,
    shapes: ShapesLike = PAPER_SHAPES,
    reps: int = 200,
    seed: int | None = None,
    jobs: int = DEFAULT_JOBS,
    workers: int | None = None,
    budget: int | str | None = None,
    predictors: int = 1,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> SweepResult:
    """Predict many shapes ("single,2x2" or a list) over `reps` replicates each; the other
    arguments are `simulate`'s."""
    the_shapes = shapes_of(shapes)
    the_scenario = scenario_of(scenario, seed, workers, budget, predictors)
    predictions = run_sweep(the_scenario, the_shapes, reps, jobs, backend, address, progress)
    return SweepResult(the_scenario, tuple(predictions))
