"""`pxn conformance`: the installed gepa on synthetic work, against the simulator (its two
synthetic tasks: pxn.api.checks.conformance)."""

from __future__ import annotations

from typing import Annotated

import typer

from pxn.api.checks import TASK_SHAPES, TASK_WORKERS
from pxn.api.console import say, stderr
from pxn.api.running import DEFAULT_JOBS
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import Format, Jobs, Out, Reps, Wide
from pxn.app.output import Output

commands = typer.Typer()
LEVELS_WORKERS = ",".join(map(str, TASK_WORKERS["levels"]))
QUALITY_WORKERS = ",".join(map(str, TASK_WORKERS["quality"]))


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
            help="The synthetic task: levels (children pass at the scenario's acceptance rates) or "
            "quality (scores follow its quality model; the search is checked too). Default: "
            "the scenario's kind; levels without a scenario.",
            show_default=False,
        ),
    ] = None,
    shapes: Annotated[
        str | None,
        typer.Option(
            help=f"Shapes to run, e.g. single,2x2 (default: {TASK_SHAPES['levels']}; "
            f"quality: {TASK_SHAPES['quality']}).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        str | None,
        typer.Option(
            help=f"Worker pools W to run each shape at (default: {LEVELS_WORKERS}; "
            f"quality: {QUALITY_WORKERS}).",
            show_default=False,
        ),
    ] = None,
    runs: Annotated[int, typer.Option(help="Real runs per shape and W.")] = 3,
    time_scale: Annotated[
        float, typer.Option(help="Synthetic calls sleep the scenario's seconds times this.")
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
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.checks import conformance

    output = Output.taken_from(flags)
    left = "nothing written" if out is None else f"the finished runs' traces are in {out / 'runs'}"
    with stopped_by_signals(left):
        result = conformance(**flags, out=out, progress=True)
    report = result.report()
    output.show(report)
    output.write(report, {})
    if result.runs_dir is not None:
        say(f"traces of the runs in {result.runs_dir}", stderr)
    if output_format != "table":  # the table's caption says it
        for verdict in result.verdicts:
            say(verdict, stderr)
    if not result.conforms:
        raise typer.Exit(1)
