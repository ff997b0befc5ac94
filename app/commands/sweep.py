"""`pxn sweep`: predict many shapes."""

from __future__ import annotations

from typing import Annotated

import typer

from pxn.api.predictions import PAPER_SHAPES
from pxn.api.running import DEFAULT_JOBS
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import (
    Address,
    Backend,
    Budget,
    Format,
    Jobs,
    Out,
    Predictors,
    Reps,
    ScenarioArg,
    Seed,
    Wide,
    Workers,
)
from pxn.app.output import Output

commands = typer.Typer()


@commands.command(name="sweep")
def sweep_command(
    scenario: ScenarioArg,
    shapes: Annotated[str, typer.Option("--shapes", help="Comma-separated shapes.")] = PAPER_SHAPES,
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = DEFAULT_JOBS,
    workers: Workers = None,
    budget: Budget = None,
    predictors: Predictors = 1,
    backend: Backend = "local",
    address: Address = None,
    out: Out = None,
    output_format: Format = "table",
    wide: Wide = False,
) -> None:
    """Predict many shapes; print them, and write sweep.csv, sweep.json and sweep.png (and
    progress.png, under a quality model) to --out."""
    from pxn.api.predictions import sweep

    output = Output(output_format, out, wide)
    with stopped_by_signals():
        result = sweep(
            scenario,
            shapes=shapes,
            reps=reps,
            seed=seed,
            jobs=jobs,
            workers=workers,
            budget=budget,
            predictors=predictors,
            backend=backend,
            address=address,
            progress=True,
        )
    report = result.report()
    with stopped_by_signals():
        output.show(report)
        output.write(report, result.figures())
