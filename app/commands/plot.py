"""`pxn plot ...`: figures of measured and simulated runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import print_set_aside, say
from pxn.api.running import DEFAULT_JOBS
from pxn.app import options
from pxn.app.interrupts import stopped_by_signals
from pxn.app.output import check_writable, refuse_overwriting_an_input
from pxn.fields import whole

commands = typer.Typer(help="Figures of measured and simulated runs.", no_args_is_help=True)


@commands.command("sweep-vs-measured")
def plot_sweep_vs_measured_command(
    runs: options.TracesArg,
    scenario: options.ScenarioOpt,
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    reps: options.ValidateReps = 200,
    jobs: options.Jobs = DEFAULT_JOBS,
) -> None:
    """Measured runs against the simulated band and the closed form, shape by shape."""
    from pxn.api.checks import validate
    from pxn.api.plots import save_figure

    check_writable(output, "output")
    refuse_overwriting_an_input(output, runs)
    with stopped_by_signals():
        result = validate(runs, scenario, reps=reps, jobs=jobs, progress=True)
    say(f"wrote {save_figure(result.figure(), output)}")


@commands.command("timeline")
def plot_timeline_command(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    iterations: Annotated[
        int | None, typer.Option(help="Show only up to this iteration's end.")
    ] = None,
) -> None:
    """One run as a Gantt chart of its workers and reflections, coloured by phase."""
    from pxn.api.plots import save_figure
    from pxn.api.timeline_plot import timeline_figure
    from pxn.trace_reading import read_one

    check_writable(output, "output")
    refuse_overwriting_an_input(output, [trace])
    if iterations is not None:
        whole(iterations, "iterations", least=0)
    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    say(f"wrote {save_figure(timeline_figure(the_trace, iterations), output)}")


@commands.command("progress")
def plot_progress_command(
    scenario: options.ScenarioArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Measured runs to overlay: trace files or run directories."),
    ] = None,
    shapes: Annotated[str, typer.Option(help="Comma-separated shapes.")] = "single,2x2",
    reps: options.Reps = 200,
    seed: options.Seed = None,
    jobs: options.Jobs = DEFAULT_JOBS,
    workers: options.Workers = None,
    budget: options.Budget = None,
) -> None:
    """The best validation score against wall-clock per shape (the quality model's bands),
    with measured runs overlaid; give the scenario at the runs' own setup."""
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.plots import save_figure
    from pxn.api.predictions import sweep

    del flags["output"], flags["runs"]  # the figure's, not the sweep's
    check_writable(output, "output")
    refuse_overwriting_an_input(output, runs or [])
    result = sweep(**flags, progress=True)
    say(f"wrote {save_figure(result.progress_figure(measured=runs or ()), output)}")
