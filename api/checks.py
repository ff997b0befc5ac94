"""The simulator against reality: `validate` (measured runs beside their predictions)
and `conformance` (the installed gepa on synthetic work), as pxn.checks does them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.api.console import WorkProgress, print_set_aside
from pxn.api.report import Report, Result
from pxn.api.running import DEFAULT_JOBS, scenario_of
from pxn.errors import PxnError

if TYPE_CHECKING:
    from collections.abc import Callable

    from matplotlib.figure import Figure

    from pxn.api.running import ScenarioLike, ShapesLike
    from pxn.checks.conformance import Conformance
    from pxn.checks.search_conformance import SearchConformance
    from pxn.checks.validate import ScenarioValidation
    from pxn.scenario import Scenario

# Each synthetic task's default shapes and worker pools: the levels task's time check at two
# pools; the quality task's shapes each at one pool (its figures of the search do not hang
# on W).
TASK_SHAPES = {"levels": "single,2x2,4x1,8x2", "quality": "single,2x2,4x1,1x4"}
TASK_WORKERS = {"levels": (4, 16), "quality": (4,)}


@dataclass(frozen=True)
class ValidateResult(Result):
    """Measured runs, each beside the prediction for its own setup; over the completed runs
    the errors, the coverage and whether the intervals are honest."""

    validation: ScenarioValidation

    def report(self) -> Report:
        from pxn.api.checks_report import validation_report

        return validation_report(self.validation)

    def summary(self) -> str:
        """The verdict in one line, as the table's caption says it."""
        from pxn.api.checks_report import summary_line

        return summary_line(self.validation)

    def figure(self) -> Figure:
        """Measured runs against the simulated band and the closed form, shape by shape."""
        from pxn.api.plots import sweep_vs_measured_figure

        return sweep_vs_measured_figure(self.validation)

    def figures(self) -> dict[str, Callable[[], Figure]]:
        """The figures `pxn validate --out` writes, by file name."""
        return {"sweep_vs_measured.png": self.figure}


def validate(
    runs: str | Path | Sequence[str | Path],
    scenario: ScenarioLike,
    *,
    reps: int = 200,
    jobs: int = DEFAULT_JOBS,
    progress: bool = False,
) -> ValidateResult:
    """Predict every run's own setup (its shape, budget, W, data sizes, b, C and LM pool)
    from `scenario` over `reps` replicates, and set the prediction beside the measurement.
    `runs`: trace files or run directories. `progress` shows a bar on stderr and names the
    traces and lines set aside."""
    from pxn.checks.validate import plan_validation, validate_planned

    paths = [runs] if isinstance(runs, str | Path) else list(runs)
    plan = plan_validation(scenario_of(scenario), paths, reps)
    meter = WorkProgress("simulating", "replicates", plan.total_replicates, shown=progress)
    with meter.told_when_stopped(), meter:
        validation = validate_planned(plan, jobs, meter.advance)
    if progress:
        print_set_aside(validation.rejected, validation.skipped_lines)
    return ValidateResult(validation)


@dataclass(frozen=True)
class ConformanceResult(Result):
    """Real gepa runs on synthetic work beside the simulator: the time check and, on the
    quality task, the search's."""

    time: Conformance
    search: SearchConformance | None  # the quality task's figures of the search
    time_scale: float
    oversleep: dict[str, float]  # how much longer than drawn the calls slept, by kind
    runs_dir: Path | None  # where the runs' traces are kept (None: they were not)

    @property
    def conforms(self) -> bool:
        return self.time.conforms and (self.search is None or self.search.conforms)

    @property
    def verdicts(self) -> list[str]:
        return [self.time.verdict] + ([self.search.verdict] if self.search else [])

    def report(self) -> Report:
        from pxn.api.checks_report import conformance_report, search_report, with_search

        report = conformance_report(self.time, self.time_scale, self.oversleep)
        return report if self.search is None else with_search(report, search_report(self.search))


def conformance(
    scenario: ScenarioLike | None = None,
    *,
    task: str | None = None,
    shapes: ShapesLike | None = None,
    workers: str | Sequence[int] | None = None,
    runs: int = 3,
    time_scale: float = 0.01,
    reps: int = 200,
    jobs: int = DEFAULT_JOBS,
    out: str | Path | None = None,
    progress: bool = False,
) -> ConformanceResult:
    """Run the installed gepa (PxNSampling) `runs` times for every shape at every W on
    synthetic work realising `scenario` (default: a built-in one), its calls sleeping the
    scenario's seconds times `time_scale`, and judge the runs against the simulator.

    `task`: "levels" (children pass at the scenario's acceptance rates) or "quality"
    (scores follow its quality model; the search is judged too); by default the scenario's
    kind. `shapes` and `workers` default to the task's. The runs' traces go to `out`/runs
    when `out` is given (a directory holding runs already is refused), else to a
    temporary directory removed at the end."""
    from pxn.checks.conformance import at_time_scale, judge
    from pxn.checks.search_conformance import judge_search
    from pxn.checks.synthetic import RunGrid, check_realisable, levels_work, oversleep, run_grid
    from pxn.checks.synthetic_quality import quality_work
    from pxn.shape import parse_shapes
    from pxn.sim.predict import check_sweep

    kept = None if out is None else Path(out) / "runs"
    if kept is not None and kept.exists():
        raise PxnError(f"{out} already holds conformance runs; give a new directory",
                       subject="out")  # fmt: skip
    kind, base = task_and_workload(task, scenario)
    truth = at_time_scale(base, time_scale)
    check_realisable(truth)
    try:
        the_shapes = parse_shapes(shapes or TASK_SHAPES[kind])
    except PxnError as exc:  # a shape of the list: the error is the shapes'
        raise exc.naming("shapes") from None
    grid = RunGrid(the_shapes, workers_of(workers or TASK_WORKERS[kind]), runs)
    check_sweep(grid.shapes, reps, jobs)
    make_work = quality_work if kind == "quality" else levels_work

    meter = WorkProgress("real gepa runs", "runs", grid.size, shown=progress)
    with (
        meter.told_when_stopped(),
        tempfile.TemporaryDirectory(prefix="pxn-conformance-") as scratch,
    ):
        runs_dir = kept or Path(scratch) / "runs"
        with meter:
            done = run_grid(truth, grid, runs_dir, lambda run: meter.advance(1), make_work)
        time = judge(
            truth,
            [run.trace for run in done],
            reps,
            jobs,
            trace_checks={str(run.trace): run.trace_check for run in done},
        )
    search = None
    if kind == "quality":
        search = judge_search(time, {str(run.trace): run.search.test_score for run in done})
    return ConformanceResult(time, search, time_scale, oversleep(done), kept)


def task_and_workload(task: str | None, scenario: ScenarioLike | None) -> tuple[str, Scenario]:
    """The synthetic task and the scenario it runs: the given ones, or each one's default."""
    from pxn.checks.conformance import DEFAULT_QUALITY_SCENARIO, DEFAULT_SCENARIO
    from pxn.scenario import Scenario

    if task not in (None, *TASK_SHAPES):
        raise PxnError(f"is levels or quality: got {task!r}", subject="task")
    if scenario is None:
        kind = task or "levels"
        return kind, DEFAULT_QUALITY_SCENARIO if kind == "quality" else DEFAULT_SCENARIO
    base = scenario_of(scenario)
    named = base.name if isinstance(scenario, Scenario) else scenario  # not a dataclass's repr
    kind = task or ("quality" if base.quality is not None else "levels")
    if kind == "quality" and base.quality is None:
        raise PxnError(f"quality needs a scenario with a [quality] table; {named} has "
                       "[acceptance] rates: leave the task out to run it on the levels task",
                       subject="task")  # fmt: skip
    if kind == "levels" and base.quality is not None:
        raise PxnError(f"levels realises [acceptance] rates; {named} has a [quality] table: "
                       "leave the task out to run it on the quality task",
                       subject="task")  # fmt: skip
    return kind, base


def workers_of(workers: str | Sequence[int]) -> list[int]:
    """Worker pools as given: "4,16" or a list of whole numbers, distinct, each >= 1."""
    if isinstance(workers, str):
        try:
            pools = [int(part) for part in workers.split(",") if part.strip()]
        except ValueError:
            raise PxnError(f"are whole numbers like 4,16: got {workers!r}",
                           subject="workers") from None  # fmt: skip
    else:
        pools = list(workers)
    if not pools or min(pools) < 1 or len(set(pools)) < len(pools):
        raise PxnError(f"are distinct whole numbers >= 1 like 4,16: got {workers!r}",
                       subject="workers")  # fmt: skip
    return pools
