"""`pxn validate`: measured runs beside the predictions for their setups."""

from __future__ import annotations

import typer

from pxn.api.console import say, stderr
from pxn.api.running import DEFAULT_JOBS
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import Format, Jobs, Out, ScenarioOpt, TracesArg, ValidateReps, Wide
from pxn.app.output import Output

commands = typer.Typer()


@commands.command()
def validate(
    runs: TracesArg,
    scenario: ScenarioOpt,
    reps: ValidateReps = 200,
    jobs: Jobs = DEFAULT_JOBS,
    output_format: Format = "table",
    out: Out = None,
    wide: Wide = False,
) -> None:
    """Set measured runs beside the simulator's and the closed form's predictions;
    write validation.csv, validation.json and sweep_vs_measured.png to --out."""
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.checks import validate as validate_runs

    output = Output.taken_from(flags)
    with stopped_by_signals():
        result = validate_runs(**flags, progress=True)
    report = result.report()
    output.show(report)
    output.write(report, result.figures())
    if output_format != "table":  # the table's caption says it
        say(result.summary(), stderr)
