"""`pxn simulate`: predict one shape."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import say, stderr
from pxn.app import options
from pxn.app.interrupts import stopped_by_signals
from pxn.app.output import Output, check_writable
from pxn.budget import FEW_PROPOSALS

commands = typer.Typer()


@commands.command()
def simulate(
    scenario: options.ScenarioArg,
    shape: Annotated[str, typer.Option(help="PxN, e.g. 2x2, or 'single'.")] = "single",
    reps: options.Reps = 200,
    seed: options.Seed = None,
    jobs: options.Jobs = 1,
    workers: options.Workers = None,
    budget: options.Budget = None,
    predictors: options.Predictors = None,
    minibatch: options.Minibatch = None,
    min_proposals: options.MinProposals = FEW_PROPOSALS,
    backend: options.Backend = "local",
    address: options.Address = None,
    trace: Annotated[
        Path | None, typer.Option(help="Also write replicate 0 as a trace (JSONL).")
    ] = None,
    output_format: options.Format = "table",
    wide: options.Wide = False,
) -> None:
    """Predict one shape: wall-clock with interval, iterations, stages, closed form."""
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.predictions import refuse_existing_trace
    from pxn.api.predictions import simulate as simulate_shape

    output = Output.taken_from(flags)
    del flags["trace"]  # written here, from the result
    if trace is not None:
        refuse_existing_trace(trace)
    check_writable(trace, "trace")
    with stopped_by_signals():
        result = simulate_shape(**flags, progress=True)
    output.show(result.report())
    if trace is not None:
        with stopped_by_signals():  # an interruption leaves no trace, not part of one
            result.write_trace(trace)
        say(f"wrote replicate 0 as a trace: {trace}", stderr)
