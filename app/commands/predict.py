"""Predict before paying: `pxn simulate`, `pxn sweep`, `pxn advise`, `pxn presets`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import WorkProgress, say, stderr, stdout
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import (
    DEFAULT_JOBS,
    Address,
    Backend,
    Budget,
    Format,
    Jobs,
    Out,
    Reps,
    ScenarioArg,
    Seed,
    Wide,
    Workers,
)
from pxn.app.output import Output, ensure_writable_outputs
from pxn.errors import PxnError

commands = typer.Typer()

PAPER_SHAPES = "single,2x1,2x2,4x1,2x4,8x1,2x8,4x4,8x2"
SMALLER_SWEEP = "lower --reps or --budget, or ask for fewer or smaller --shapes"
SMALLER_ASK = "lower --reps or --budget, or narrow --p, --n, --b or --workers"


def scenario_with_overrides(
    name_or_path: str, seed: int | None, workers: int | None, budget: int | None
):
    from pxn.sim.presets import load_scenario

    if seed is not None and seed < 0:  # a negative seed would fail in numpy, after the work
        raise PxnError(f"must be a whole number >= 0: got {seed}", subject="seed")
    scenario = load_scenario(name_or_path)
    changes = {
        key: value
        for key, value in {"seed": seed, "workers": workers, "budget": budget}.items()
        if value is not None
    }
    return scenario.replace(**changes) if changes else scenario


def processes_of(backend: str, address: str | None, jobs: int) -> int | None:
    """The processes the work will be spread over; None: a Ray cluster's, unknown here."""
    return None if backend == "ray" and address is not None else jobs


def checked_work(
    work, what: str, backend: str, address: str | None, jobs: int, smaller: str
) -> str:
    """Refuse work that could never finish here; else what it should take, in words."""
    from pxn.sim.workload import check_work, roughly

    processes = processes_of(backend, address, jobs)
    check_work(work, processes, what, smaller)
    if processes is None:  # a cluster's size is unknown: its time is not judged here
        return f"{roughly(work.seconds)} of CPU"
    return f"{roughly(work.wall_seconds(processes))} on {processes} process(es) if idle"


def run_sweep(scenario, shapes, reps: int, jobs: int, backend: str, address: str | None):
    from pxn.sim.backends import make_backend
    from pxn.sim.predict import check_sweep, sweep, sweep_work, total_replicates

    check_sweep(shapes, reps, jobs)  # before the progress bar draws anything
    progress = WorkProgress("simulating", "replicates", total_replicates(scenario, shapes, reps))
    with stopped_by_signals(progress):
        work = sweep_work(scenario, shapes, reps)
        progress.estimate = checked_work(work, "this sweep", backend, address, jobs, SMALLER_SWEEP)
        # Opened (Ray connected) before the bar too: a bad address is one line.
        with make_backend(backend, address, jobs) as the_backend, progress:
            return sweep(
                scenario,
                shapes,
                reps,
                jobs=jobs,
                on_progress=progress.advance,
                backend=the_backend,
            )


@commands.command()
def simulate(
    scenario: ScenarioArg,
    shape: Annotated[str, typer.Option("--shape", help="PxN, e.g. 2x2, or 'single'.")] = "single",
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = 1,
    workers: Workers = None,
    budget: Budget = None,
    backend: Backend = "local",
    address: Address = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Also write replicate 0 as a trace (JSONL).")
    ] = None,
    output_format: Format = "table",
    wide: Wide = False,
) -> None:
    """Predict one shape: wall-clock with interval, iterations, stages, closed form."""
    from pxn.api.prediction_report import predictions_report
    from pxn.shape import Shape

    output = Output(output_format, wide=wide)
    the_shape = Shape.parse(shape)
    the_scenario = scenario_with_overrides(scenario, seed, workers, budget)
    if trace is not None and trace.exists():
        raise PxnError(f"{trace} already exists; choose a new path", subject="trace")
    ensure_writable_outputs(files={"trace": trace})
    [prediction] = run_sweep(the_scenario, [the_shape], reps, jobs, backend, address)
    output.show(predictions_report(the_scenario, [prediction], stages=True))
    if trace is not None:
        with stopped_by_signals():
            write_replicate_trace(the_scenario, the_shape, trace)
        say(f"wrote replicate 0 as a trace: {trace}", stderr)


def write_replicate_trace(scenario, shape, trace: Path) -> None:
    """Replicate 0 as a trace, in place whole or not at all (an interruption leaves none)."""
    from pxn.sim.model import simulate_once
    from pxn.trace import TraceWriter

    trace.parent.mkdir(parents=True, exist_ok=True)
    partial = trace.with_name(f".{trace.name}.partial")
    try:
        with TraceWriter(partial) as writer:
            simulate_once(scenario, shape, 0, writer)
        partial.replace(trace)
    finally:
        partial.unlink(missing_ok=True)


@commands.command(name="sweep")
def sweep_command(
    scenario: ScenarioArg,
    shapes: Annotated[str, typer.Option("--shapes", help="Comma-separated shapes.")] = PAPER_SHAPES,
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = DEFAULT_JOBS,
    workers: Workers = None,
    budget: Budget = None,
    backend: Backend = "local",
    address: Address = None,
    out: Out = None,
    output_format: Format = "table",
    wide: Wide = False,
) -> None:
    """Predict many shapes; print them, and write sweep.csv, sweep.json and sweep.png to --out."""
    from pxn.api.prediction_report import predictions_report
    from pxn.shape import parse_shapes

    output = Output(output_format, out, wide)
    the_shapes = parse_shapes(shapes)
    the_scenario = scenario_with_overrides(scenario, seed, workers, budget)
    predictions = run_sweep(the_scenario, the_shapes, reps, jobs, backend, address)
    report = predictions_report(the_scenario, predictions)
    with stopped_by_signals():
        output.show(report)
        if out is not None:
            from pxn.api.plots import plot_sweep  # matplotlib: only when a figure is asked for

            output.write(
                report, {"sweep.png": lambda path: plot_sweep(the_scenario, predictions, path)}
            )


@commands.command(name="advise")
def advise_command(
    scenario: ScenarioArg,
    budget: Annotated[int, typer.Option("--budget", help="The budget B (metric calls).")],
    deadline: Annotated[
        str | None, typer.Option("--deadline", help="Wall-clock limit: 3h, 90m, 1h30m, 600s.")
    ] = None,
    max_dollars: Annotated[
        float | None, typer.Option("--max-dollars", help="Dollar cap (the scenario needs prices).")
    ] = None,
    workers: Annotated[
        str | None, typer.Option("--workers", help="Pools W to try: 64,128,512 or 1..8.")
    ] = None,
    p: Annotated[str, typer.Option("--p", help="Parents per step P: 1..8 or 1,2,4.")] = "1..4",
    n: Annotated[str, typer.Option("--n", help="Mutations per parent N.")] = "1..4",
    b: Annotated[
        str | None,
        typer.Option("--b", help="Reflection minibatch sizes (default: the scenario's)."),
    ] = None,
    objective: Annotated[str, typer.Option("--objective", help="time or cost.")] = "time",
    reps: Annotated[
        int, typer.Option("--reps", help="Replicates per allocation (a race gives 20 first).")
    ] = 100,
    full_grid: Annotated[
        bool,
        typer.Option(
            "--full-grid", help="Simulate every allocation fully (default: race grids of 65+)."
        ),
    ] = False,
    seed: Seed = None,
    jobs: Jobs = DEFAULT_JOBS,
    backend: Backend = "local",
    address: Address = None,
    out: Out = None,
    output_format: Format = "table",
    wide: Wide = False,
) -> None:
    """Recommend P, N, b and W for a budget under a deadline, a dollar cap and rate limits;
    write advise.csv, advise.json and pareto.png to --out.

    Exit code 1 when no allocation meets the ask (the reasons are printed).
    """
    from pxn.api.advice_report import advice_report
    from pxn.durations import parse_duration
    from pxn.sim.advise import Ask, advise, advise_work, check_ask, parse_values
    from pxn.sim.backends import make_backend

    output = Output(output_format, out, wide)
    the_scenario = scenario_with_overrides(scenario, seed, None, None)
    ask = Ask(
        budget=budget,
        p=parse_values(p, "p"),
        n=parse_values(n, "n"),
        b=parse_values(b, "b") if b else (the_scenario.minibatch,),
        workers=parse_values(workers, "workers") if workers else (the_scenario.workers,),
        deadline=None if deadline is None else parse_duration(deadline, "--deadline"),
        max_dollars=max_dollars,
        objective=objective,
        replicates=reps,
        race=not full_grid,
    )
    check_ask(the_scenario, ask)  # before the progress bar draws anything
    progress = WorkProgress("simulating allocations", "replicates", ask.grid_size * ask.first_round)
    with stopped_by_signals(progress):
        guess = checked_work(
            advise_work(the_scenario, ask), "this search", backend, address, jobs, SMALLER_ASK
        )
        race = " for the race's first round" if ask.first_round < ask.replicates else ""
        progress.estimate = guess + race
        with make_backend(backend, address, jobs) as the_backend, progress:
            advice = advise(the_scenario, ask, the_backend, on_progress=progress.update)
    report = advice_report(advice)
    with stopped_by_signals():
        output.show(report)
        if out is not None:
            from pxn.api.plots import plot_advice  # matplotlib: only when a figure is asked for

            drawn = {"pareto.png": lambda path: plot_advice(advice, path)}
            output.write(report, drawn if advice.assessments else {})
    if advice.recommended is None:
        for reason in advice.reasons:
            print(f"pxn: {reason}", file=sys.stderr)
        raise typer.Exit(1)


@commands.command()
def presets() -> None:
    """List the built-in scenarios (the paper's setups)."""
    from pxn.api.tables import Column, Grid, fit
    from pxn.durations import format_duration
    from pxn.sim.presets import load_scenario, preset_names

    grid = Grid(
        title="presets (sim/presets/; each file's header says how it was inferred)",
        columns=[
            Column("name", left=True),
            Column("B"),
            Column("V"),
            Column("W"),
            Column("mean\nrollout"),
            Column("mean\nreflection"),
            Column("a0"),
        ],
    )
    scenarios = [load_scenario(name) for name in preset_names()]
    for s in scenarios:
        grid.add_row(
            s.name,
            str(s.budget),
            str(s.valset_size),
            str(s.workers),
            format_duration(s.rollout.mean()),
            format_duration(s.reflection.mean()),
            f"{s.acceptance.a0:g}",
        )
    stdout.print(fit(grid, stdout))
    for s in scenarios:  # the prose below the table: a column of it would not fit
        say(f"{s.name}: {s.description}")
