"""`pxn validate`: measured runs beside the predictions for their setups."""

from __future__ import annotations

from pathlib import Path

import typer

from pxn.api.console import WorkProgress, print_set_aside, say, stderr
from pxn.api.running import DEFAULT_JOBS
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import Format, Jobs, Out, ScenarioOpt, TracesArg, ValidateReps, Wide
from pxn.app.output import Output

commands = typer.Typer()


def run_validation(scenario: str, runs: list[Path], reps: int, jobs: int):
    """Validate with a progress bar; Ctrl-C or SIGTERM stops it with one line."""
    from pxn.calibrate.validate import plan_validation, validate_planned
    from pxn.sim.presets import load_scenario

    plan = plan_validation(load_scenario(scenario), runs, reps)
    progress = WorkProgress("simulating", "replicates", plan.total_replicates)
    with stopped_by_signals(), progress.told_when_stopped(), progress:
        validation = validate_planned(plan, jobs, progress.advance)
    print_set_aside(validation.rejected, validation.skipped_lines)
    return validation


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
    from pxn.app.validation_report import summary_line, validation_report

    output = Output(output_format, out, wide)
    validation = run_validation(scenario, runs, reps, jobs)
    report = validation_report(validation)
    output.show(report)

    def figure():
        from pxn.api.plots import sweep_vs_measured_figure

        return sweep_vs_measured_figure(validation)

    output.write(report, {"sweep_vs_measured.png": figure})
    if output_format != "table":  # the table's caption says it
        say(summary_line(validation), stderr)
