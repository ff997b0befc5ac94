"""`pxn conformance`: the installed gepa on synthetic work, against the simulator.

Two synthetic tasks (`--task`): levels, whose children pass at a scenario's
[acceptance] rates (the time check), and quality, whose scores follow a
scenario's [quality] model (the time check and the search's figures). The
task follows the scenario when not given; each has its own default workload,
shapes and worker pools.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pxn.api.console import WorkProgress, say, stderr
from pxn.api.report import Note, Report
from pxn.api.running import DEFAULT_JOBS
from pxn.api.tables import Column, Grid
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import Format, Jobs, Out, Reps, Wide
from pxn.app.output import Output
from pxn.errors import PxnError

if TYPE_CHECKING:  # imported when the command runs: the CLI starts without scipy or gepa
    from pxn.calibrate.conformance import Conformance
    from pxn.scenario import Scenario

commands = typer.Typer()

# Each task's default shapes and worker pools: the levels task's time check at two pools;
# the quality task's shapes each at one pool (its figures of the search do not hang on W).
TASK_SHAPES = {"levels": "single,2x2,4x1,8x2", "quality": "single,2x2,4x1,1x4"}
TASK_WORKERS = {"levels": "4,16", "quality": "4"}


def parse_workers(text: str) -> list[int]:
    try:
        workers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise PxnError(f"are whole numbers like 4,16: got {text!r}", subject="workers") from None
    if not workers or min(workers) < 1 or len(set(workers)) < len(workers):
        raise PxnError(f"are distinct whole numbers >= 1 like 4,16: got {text!r}",
                       subject="workers")  # fmt: skip
    return workers


@commands.command("conformance")
def conformance_command(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="The workload: a scenario TOML or a preset (default: a built-in one with "
            "2 s rollouts, 9 s reflections and 30% acceptance; with --task quality, a "
            "quality model instead of the rate).",
            show_default=False,
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="The synthetic task: levels (children pass at the scenario's acceptance rates) or "
            "quality (scores follow its quality model; the search is checked too). Default: "
            "the scenario's kind; levels without a scenario.",
            show_default=False,
        ),
    ] = None,
    shapes: Annotated[
        str | None,
        typer.Option(
            "--shapes",
            help=f"Shapes to run, e.g. single,2x2 (default: {TASK_SHAPES['levels']}; "
            f"quality: {TASK_SHAPES['quality']}).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        str | None,
        typer.Option(
            "--workers",
            help=f"Worker pools W to run each shape at (default: {TASK_WORKERS['levels']}; "
            f"quality: {TASK_WORKERS['quality']}).",
            show_default=False,
        ),
    ] = None,
    runs: Annotated[int, typer.Option("--runs", help="Real runs per shape and W.")] = 3,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale", help="Synthetic calls sleep the scenario's seconds times this."
        ),
    ] = 0.01,
    reps: Reps = 200,
    jobs: Jobs = DEFAULT_JOBS,
    output_format: Format = "table",
    out: Out = None,
    wide: Wide = False,
) -> None:
    """Run the installed gepa (PxNSampling) on synthetic work of known latency and acceptance
    (or quality), and say whether the simulator still describes it. Writes the runs' traces
    and conformance.csv/json to --out. Exit code 1 when it does not conform."""
    from pxn.api.search_conformance_report import search_report
    from pxn.calibrate.conformance import at_time_scale, judge
    from pxn.calibrate.search_conformance import judge_search
    from pxn.runner.synthetic import RunGrid, check_realisable, levels_work, oversleep, run_grid
    from pxn.runner.synthetic_quality import quality_work
    from pxn.shape import parse_shapes
    from pxn.sim.predict import check_sweep

    output = Output(output_format, out, wide)
    if out is not None and (out / "runs").exists():
        raise PxnError(f"{out} already holds conformance runs; give a new directory",
                       subject="out")  # fmt: skip
    kind, base = task_and_workload(task, scenario)
    truth = at_time_scale(base, time_scale)
    check_realisable(truth)
    try:
        the_shapes = parse_shapes(shapes or TASK_SHAPES[kind])
    except PxnError as exc:  # a shape of the list: the error is the --shapes flag's
        raise exc.naming("shapes") from None
    grid = RunGrid(the_shapes, parse_workers(workers or TASK_WORKERS[kind]), runs)
    check_sweep(grid.shapes, reps, jobs)
    make_work = quality_work if kind == "quality" else levels_work

    progress = WorkProgress("real gepa runs", "runs", grid.size)
    left = "nothing written" if out is None else f"the finished runs' traces are in {out / 'runs'}"
    with (
        stopped_by_signals(left),
        progress.told_when_stopped(),
        tempfile.TemporaryDirectory(prefix="pxn-conformance-") as scratch,
    ):
        runs_dir = (out if out is not None else Path(scratch)) / "runs"
        with progress:
            done = run_grid(truth, grid, runs_dir, lambda run: progress.advance(1), make_work)
        result = judge(
            truth,
            [run.trace for run in done],
            reps,
            jobs,
            trace_checks={str(run.trace): run.trace_check for run in done},
        )
    report = conformance_report(result, time_scale, oversleep(done))
    verdicts, conforms = [result.verdict], result.conforms
    if kind == "quality":
        test_scores = {str(run.trace): run.search.test_score for run in done}
        search = judge_search(result, test_scores)
        report = with_search(report, search_report(search))
        verdicts.append(search.verdict)
        conforms = conforms and search.conforms
    output.show(report)
    output.write(report, {})
    if out is not None:
        say(f"traces of the runs in {out / 'runs'}", stderr)
    if output_format != "table":  # the table's caption says it
        for verdict in verdicts:
            say(verdict, stderr)
    if not conforms:
        raise typer.Exit(1)


def task_and_workload(task: str | None, scenario: str | None) -> tuple[str, Scenario]:
    """The synthetic task and the scenario it runs: the given ones, or each one's default."""
    from pxn.calibrate.conformance import DEFAULT_QUALITY_SCENARIO, DEFAULT_SCENARIO
    from pxn.sim.presets import load_scenario

    if task not in (None, *TASK_SHAPES):
        raise PxnError(f"is levels or quality: got {task!r}", subject="task")
    if scenario is None:
        kind = task or "levels"
        return kind, DEFAULT_QUALITY_SCENARIO if kind == "quality" else DEFAULT_SCENARIO
    base = load_scenario(scenario)
    kind = task or ("quality" if base.quality is not None else "levels")
    if kind == "quality" and base.quality is None:
        raise PxnError(f"quality needs a scenario with a [quality] table; {scenario} has "
                       "[acceptance] rates: drop --task to run it on the levels task",
                       subject="task")  # fmt: skip
    if kind == "levels" and base.quality is not None:
        raise PxnError(f"levels realises [acceptance] rates; {scenario} has a [quality] table: "
                       "drop --task to run it on the quality task", subject="task")  # fmt: skip
    return kind, base


def with_search(time: Report, search: Report) -> Report:
    """The time check's report with the search's after it: each run's row with its figures of
    the search, the JSON's document with the search's under "search"."""
    figures = {row["run"]: row for row in search.rows}
    return Report(
        name=time.name,
        shown=[*time.shown, *search.shown],
        rows=[row | figures[row["run"]] for row in time.rows],
        document=time.document | {"search": search.document},
    )


def conformance_report(result: Conformance, time_scale: float, sleeps: dict[str, float]) -> Report:
    """The groups as a table, the verdict beneath; every run in the CSV and the JSON."""
    from pxn.app.validation_report import check_row

    grid = Grid(
        title=f"real gepa on synthetic work vs the simulator (time scale {time_scale:g})",
        columns=[
            Column("shape", left=True),
            Column("W"),
            Column("in", words="runs inside the simulated 5-95% interval"),
            Column("mean\npct", words="mean percentile among the simulated runs"),
            Column("measured", words="measured mean wall-clock"),
            Column("simulated", words="simulated mean wall-clock"),
            Column("sim\nMAPE", rank=1, words="simulator MAPE"),
            Column("closed\nMAPE", rank=1, words="closed-form MAPE"),
            Column("overhead\nms/stage", rank=2, words="gepa's overhead, ms per stage"),
            Column("flag", left=True),
        ],
        caption=f"{result.replicates} simulated replicates per run's setup; seconds as slept "
        f"(the scenario's times {time_scale:g})",
    )
    for g in result.groups:
        measured = sum(r.check.wall_clock for r in g.runs) / len(g.runs)
        simulated = sum(r.check.predicted.wall_clock.mean for r in g.runs) / len(g.runs)
        grid.add_row(
            g.shape.label,
            str(g.workers),
            f"{g.inside}/{len(g.runs)}",
            f"{g.mean_percentile:.0%}",
            f"{measured:.2f} s",
            f"{simulated:.2f} s",
            f"{g.sim_mape:.1%}",
            f"{g.analytic_mape:.1%}",
            f"{g.stage_overhead * 1000:.1f}",
            "OFF" if g.flagged else "",
        )
    notes = [
        Note(result.verdict, label="verdict"),
        Note(
            f"{result.acceptance_measured:.1%} of proposals accepted, the simulator "
            f"{result.acceptance_simulated:.1%}; calls slept {sleeps['rollouts']:+.2%} "
            f"(rollouts) and {sleeps['reflections']:+.2%} (reflections) beyond their draws",
            label="acceptance",
        ),
    ]
    notes += [Note(reason, label="set aside") for reason in result.rejected]
    rows = [
        {
            **check_row(r.check),
            "workers": r.check.measured_setup["workers"],
            "percentile": r.percentile,
            "trace_check": r.trace_check,
        }
        for r in result.runs
    ]
    document = {
        "gepa": result.gepa_versions,
        "conforms": result.conforms,
        "verdict": result.verdict,
        "time_scale": time_scale,
        "scenario": result.scenario.to_dict(),
        "p_uniform": result.p_uniform,
        "p_coverage": result.p_coverage,
        "inside": result.inside,
        "runs_counted": len(result.runs),
        "sim_mape": result.sim_mape,
        "analytic_mape": result.analytic_mape,
        "acceptance_measured": result.acceptance_measured,
        "acceptance_simulated": result.acceptance_simulated,
        "oversleep": sleeps,
        "groups": [
            {
                "shape": g.shape.label,
                "workers": g.workers,
                "runs": len(g.runs),
                "inside": g.inside,
                "mean_percentile": g.mean_percentile,
                "sim_mape": g.sim_mape,
                "analytic_mape": g.analytic_mape,
                "stage_overhead_s": g.stage_overhead,
                "p_uniform": g.p_uniform,
                "p_coverage": g.p_coverage,
                "flagged": g.flagged,
            }
            for g in result.groups
        ],
        "runs": rows,
        "set_aside": result.rejected,
    }
    return Report(name="conformance", shown=[grid, *notes], rows=rows, document=document)
