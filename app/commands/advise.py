"""`pxn advise`: which allocation to run."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pxn.api.running import DEFAULT_JOBS
from pxn.app import options
from pxn.app.interrupts import stopped_by_signals
from pxn.app.output import Output
from pxn.budget import FEW_PROPOSALS

commands = typer.Typer()


@commands.command(name="advise")
def advise_command(
    scenario: options.ScenarioArg,
    budget: Annotated[
        str | None,
        typer.Option(
            help=f"The budget B (default: the scenario's), or budgets to compare by score: "
            f"{options.BUDGETS_HELP}."
        ),
    ] = None,
    predictors: options.Predictors = None,
    deadline: options.Deadline = None,
    max_dollars: options.MaxDollars = None,
    target_score: Annotated[
        float | None,
        typer.Option(
            help="A test score to reach in 90% of runs: the fastest allocation that does "
            "(with --objective cost, the cheapest)."
        ),
    ] = None,
    workers: Annotated[str | None, typer.Option(help="Pools W to try: 64,128,512 or 1..8.")] = None,
    p: Annotated[str, typer.Option(help="Parents per iteration P: 1..8 or 1,2,4.")] = "1..4",
    n: Annotated[str, typer.Option(help="Proposals per parent N.")] = "1..4",
    minibatch: Annotated[
        str | None, typer.Option(help="Reflection minibatch sizes b (default: the scenario's).")
    ] = None,
    objective: Annotated[
        str, typer.Option(help=r"time, cost or score (needs \[quality]).")
    ] = "time",
    reps: Annotated[
        int, typer.Option(help="Replicates per allocation (a race gives 20 first).")
    ] = 100,
    full_grid: Annotated[
        bool,
        typer.Option(
            "--full-grid", help="Simulate every allocation fully (default: race grids of 65+)."
        ),
    ] = False,
    min_proposals: options.MinProposals = FEW_PROPOSALS,
    seed: options.Seed = None,
    jobs: options.Jobs = DEFAULT_JOBS,
    backend: options.Backend = "local",
    address: options.Address = None,
    out: options.Out = None,
    output_format: options.Format = "table",
    wide: options.Wide = False,
) -> None:
    """Recommend P, N, b and W (and B, among several budgets) under a deadline, a dollar cap
    and rate limits, or the fastest to reach a --target-score; write advise.csv, advise.json
    and pareto.png to --out.

    Exit code 1 when no allocation meets the ask (the reasons are printed).
    """
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.advice import advise

    output = Output.taken_from(flags)
    with stopped_by_signals():
        result = advise(**flags, progress=True)
    report = result.report()
    with stopped_by_signals():
        output.show(report)
        output.write(report, {"pareto.png": result.figure} if result.advice.assessments else {})
    if result.recommended is None:
        for reason in result.reasons:
            print(f"pxn: {reason}", file=sys.stderr)
        raise typer.Exit(1)
