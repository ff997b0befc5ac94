"""`pxn conformance`: the installed gepa on synthetic work, against the simulator."""

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

commands = typer.Typer()


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
            "2 s rollouts, 9 s reflections and 30% acceptance).",
            show_default=False,
        ),
    ] = None,
    shapes: Annotated[
        str, typer.Option("--shapes", help="Shapes to run, e.g. single,2x2.")
    ] = "single,2x2,4x1,8x2",
    workers: Annotated[
        str, typer.Option("--workers", help="Worker pools W to run each shape at.")
    ] = "4,16",
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
    """Run the installed gepa (PxNSampling) on synthetic work of known latency and acceptance,
    and say whether the simulator still describes it. Writes the runs' traces and
    conformance.csv/json to --out. Exit code 1 when it does not conform."""
    from pxn.calibrate.conformance import DEFAULT_SCENARIO, at_time_scale, judge
    from pxn.runner.synthetic import RunGrid, check_realisable, oversleep, run_grid
    from pxn.shape import parse_shapes
    from pxn.sim.predict import check_sweep
    from pxn.sim.presets import load_scenario

    output = Output(output_format, out, wide)
    if out is not None and (out / "runs").exists():
        raise PxnError(f"{out} already holds conformance runs; give a new directory",
                       subject="out")  # fmt: skip
    base = DEFAULT_SCENARIO if scenario is None else load_scenario(scenario)
    truth = at_time_scale(base, time_scale)
    check_realisable(truth)
    try:
        the_shapes = parse_shapes(shapes)
    except PxnError as exc:  # a shape of the list: the error is the --shapes flag's
        raise exc.naming("shapes") from None
    grid = RunGrid(the_shapes, parse_workers(workers), runs)
    check_sweep(grid.shapes, reps, jobs)

    progress = WorkProgress("real gepa runs", "runs", grid.size)
    left = "nothing written" if out is None else f"the finished runs' traces are in {out / 'runs'}"
    with (
        stopped_by_signals(left),
        progress.told_when_stopped(),
        tempfile.TemporaryDirectory(prefix="pxn-conformance-") as scratch,
    ):
        runs_dir = (out if out is not None else Path(scratch)) / "runs"
        with progress:
            done = run_grid(truth, grid, runs_dir, lambda run: progress.advance(1))
        result = judge(
            truth,
            [run.trace for run in done],
            reps,
            jobs,
            trace_checks={str(run.trace): run.trace_check for run in done},
        )
    report = conformance_report(result, time_scale, oversleep(done))
    output.show(report)
    output.write(report, {})
    if out is not None:
        say(f"traces of the runs in {out / 'runs'}", stderr)
    if output_format != "table":  # the table's caption says it
        say(result.verdict, stderr)
    if not result.conforms:
        raise typer.Exit(1)


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
