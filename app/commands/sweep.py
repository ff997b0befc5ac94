"""`pxn sweep`: predict many shapes."""

from __future__ import annotations

from typing import Annotated

import typer

from pxn.api.predictions import PAPER_SHAPES
from pxn.api.running import DEFAULT_JOBS
from pxn.app import options
from pxn.app.interrupts import stopped_by_signals
from pxn.app.output import Output
from pxn.budget import FEW_PROPOSALS

commands = typer.Typer()


@commands.command(name="sweep")
def sweep_command(
    scenario: options.ScenarioArg,
    shapes: Annotated[str, typer.Option(help="Comma-separated shapes.")] = PAPER_SHAPES,
    reps: options.Reps = 200,
    seed: options.Seed = None,
    jobs: options.Jobs = DEFAULT_JOBS,
    workers: options.Workers = None,
    budget: options.Budget = None,
    budgets: Annotated[
        str | None, typer.Option(help=f"Learning curves over budgets B: {options.BUDGETS_HELP}.")
    ] = None,
    predictors: options.Predictors = None,
    minibatch: options.Minibatch = None,
    deadline: options.Deadline = None,
    max_dollars: options.MaxDollars = None,
    min_proposals: options.MinProposals = FEW_PROPOSALS,
    backend: options.Backend = "local",
    address: options.Address = None,
    out: options.Out = None,
    output_format: options.Format = "table",
    wide: options.Wide = False,
) -> None:
    """Predict many shapes, or with --budgets their learning curves; print them, and write
    sweep.csv, sweep.json and sweep.png (and progress.png and, with --budgets, curves.png,
    under a quality model) to --out."""
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.predictions import sweep

    output = Output.taken_from(flags)
    with stopped_by_signals():
        result = sweep(**flags, progress=True)
    report = result.report()
    with stopped_by_signals():
        output.show(report)
        output.write(report, result.figures())
