"""`pxn sweep`: predict many shapes."""

from __future__ import annotations

from typing import Annotated

import typer

from pxn.api.predictions import PAPER_SHAPES
from pxn.api.running import DEFAULT_JOBS
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import (
    BUDGETS_HELP,
    Address,
    Backend,
    Budget,
    Deadline,
    Format,
    Jobs,
    MaxDollars,
    Minibatch,
    MinProposals,
    Out,
    Predictors,
    Reps,
    ScenarioArg,
    Seed,
    Wide,
    Workers,
)
from pxn.app.output import Output
from pxn.budget import FEW_PROPOSALS

commands = typer.Typer()


@commands.command(name="sweep")
def sweep_command(
    scenario: ScenarioArg,
    shapes: Annotated[str, typer.Option(help="Comma-separated shapes.")] = PAPER_SHAPES,
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = DEFAULT_JOBS,
    workers: Workers = None,
    budget: Budget = None,
    budgets: Annotated[
        str | None, typer.Option(help=f"Learning curves over budgets B: {BUDGETS_HELP}.")
    ] = None,
    predictors: Predictors = None,
    minibatch: Minibatch = None,
    deadline: Deadline = None,
    max_dollars: MaxDollars = None,
    min_proposals: MinProposals = FEW_PROPOSALS,
    backend: Backend = "local",
    address: Address = None,
    out: Out = None,
    output_format: Format = "table",
    wide: Wide = False,
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
