"""Predict before paying: `pxn simulate`, `pxn sweep`, `pxn advise`, `pxn presets`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from pxn.app.console import progress_bar, stderr, stdout
from pxn.errors import PxnError

commands = typer.Typer()

DEFAULT_JOBS = min(2, os.cpu_count() or 1)
PAPER_SHAPES = "single,2x1,2x2,4x1,2x4,8x1,2x8,4x4,8x2"
RUNNERS_UP = 4  # allocations within noise of the recommendation printed in full

ScenarioArg = Annotated[
    str, typer.Argument(help="A scenario TOML file, or a preset: livebench-math, hover.")
]
Reps = Annotated[int, typer.Option("--reps", help="Simulated replicates per shape.")]
Seed = Annotated[
    int | None,
    typer.Option("--seed", help="Base seed (default: the scenario's); same seed, same bits."),
]
Jobs = Annotated[int, typer.Option("--jobs", help="Processes to spread replicates over.")]
Workers = Annotated[int | None, typer.Option("--workers", help="Override the worker pool W.")]
Budget = Annotated[
    int | None, typer.Option("--budget", help="Override the budget B (metric calls).")
]
BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="local (processes on this machine) or ray (Ray tasks; needs the ray extra).",
    ),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="HOST:PORT of a running Ray head (`ray start --head`); "
        "without it --backend ray starts a private local Ray with --jobs CPUs.",
    ),
]


def scenario_with_overrides(
    name_or_path: str, seed: int | None, workers: int | None, budget: int | None
):
    from pxn.sim.presets import load_scenario

    scenario = load_scenario(name_or_path)
    changes = {
        key: value
        for key, value in {"seed": seed, "workers": workers, "budget": budget}.items()
        if value is not None
    }
    return scenario.replace(**changes) if changes else scenario


def run_sweep(scenario, shapes, reps: int, jobs: int, backend: str = "local", address=None):
    from pxn.sim.backends import make_backend
    from pxn.sim.predict import check_sweep, sweep, total_replicates

    check_sweep(shapes, reps, jobs)  # before the progress bar draws anything
    # Opened (Ray connected) before the bar too: a bad address is one line.
    with (
        make_backend(backend, address, jobs) as the_backend,
        progress_bar() as progress,
    ):
        task = progress.add_task("simulating", total=total_replicates(shapes, reps))
        return sweep(
            scenario,
            shapes,
            reps,
            jobs,
            on_progress=lambda n: progress.advance(task, n),
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
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Also write replicate 0 as a trace (JSONL).")
    ] = None,
) -> None:
    """Predict one shape: wall-clock with interval, iterations, stages, closed form."""
    from pxn.app.prediction_report import predictions_table, stage_table
    from pxn.shape import Shape

    the_shape = Shape.parse(shape)
    the_scenario = scenario_with_overrides(scenario, seed, workers, budget)
    if trace is not None and trace.exists():
        raise PxnError(f"--trace {trace} already exists; choose a new path")
    [prediction] = run_sweep(the_scenario, [the_shape], reps, jobs, backend, address)
    stdout.print(predictions_table(the_scenario, [prediction]))
    stdout.print(stage_table(prediction))
    if trace is not None:
        from pxn.sim.model import simulate_once
        from pxn.trace import TraceWriter

        trace.parent.mkdir(parents=True, exist_ok=True)
        with TraceWriter(trace) as writer:
            simulate_once(the_scenario, the_shape, 0, writer)
        stdout.print(f"trace of replicate 0: {trace}")


@commands.command(name="sweep")
def sweep_command(
    scenario: ScenarioArg,
    shapes: Annotated[str, typer.Option("--shapes", help="Comma-separated shapes.")] = PAPER_SHAPES,
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = DEFAULT_JOBS,
    workers: Workers = None,
    budget: Budget = None,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Directory for sweep.csv, sweep.json, sweep.png.")
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="What to print: table, csv or json.")
    ] = "table",
) -> None:
    """Predict many shapes; print them and write CSV, JSON and a figure."""
    from pxn.app.prediction_report import predictions_csv, predictions_json, predictions_table
    from pxn.files import write_text_atomically
    from pxn.shape import parse_shapes

    if output_format not in ("table", "csv", "json"):
        raise PxnError(f"--format is table, csv or json: got {output_format!r}")
    the_shapes = parse_shapes(shapes)
    the_scenario = scenario_with_overrides(scenario, seed, workers, budget)
    predictions = run_sweep(the_scenario, the_shapes, reps, jobs, backend, address)
    if output_format == "table":
        stdout.print(predictions_table(the_scenario, predictions))
    elif output_format == "csv":
        sys.stdout.write(predictions_csv(predictions))
    else:
        sys.stdout.write(predictions_json(the_scenario, predictions) + "\n")
    if out is not None:
        from pxn.app.plots import plot_sweep  # matplotlib: only when a figure is asked for

        write_text_atomically(out / "sweep.csv", predictions_csv(predictions))
        write_text_atomically(out / "sweep.json", predictions_json(the_scenario, predictions))
        figure = plot_sweep(the_scenario, predictions, out / "sweep.png")
        stderr.print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {figure}")


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
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for advise.csv, advise.json, pareto.png."),
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="What to print: table, csv or json.")
    ] = "table",
) -> None:
    """Recommend P, N, b and W for a budget under a deadline, a dollar cap and rate limits.

    Exit code 1 when no allocation meets the ask (the reasons are printed).
    """
    from pxn.app.advice_report import advice_csv, advice_json, advice_table, describe, headline
    from pxn.durations import parse_duration
    from pxn.files import write_text_atomically
    from pxn.sim.advise import Ask, advise, check_ask, parse_values
    from pxn.sim.backends import make_backend

    if output_format not in ("table", "csv", "json"):
        raise PxnError(f"--format is table, csv or json: got {output_format!r}")
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
    with (
        make_backend(backend, address, jobs) as the_backend,
        progress_bar() as progress,
    ):
        task = progress.add_task("simulating allocations", total=None)
        advice = advise(
            the_scenario,
            ask,
            the_backend,
            on_progress=lambda done, total: progress.update(task, completed=done, total=total),
        )
    if output_format == "csv":
        sys.stdout.write(advice_csv(advice))
    elif output_format == "json":
        sys.stdout.write(advice_json(advice) + "\n")
    else:
        # soft_wrap: a line per allocation, whatever the terminal's width.
        for line in headline(advice):
            stdout.print(line, markup=False, soft_wrap=True)
        if advice.recommended is not None:
            lines = [f"\nrecommended: {describe(advice.recommended)}"]
            lines += [f"  within noise: {describe(x)}" for x in advice.runners_up[:RUNNERS_UP]]
            if len(advice.runners_up) > RUNNERS_UP:
                more = len(advice.runners_up) - RUNNERS_UP
                lines.append(f"  and {more} more within noise ('tie' in the table and the CSV)")
            for line in lines:
                stdout.print(line, markup=False, soft_wrap=True)
        if advice.assessments:
            stdout.print(advice_table(advice))
    if out is not None:
        written = []
        if advice.assessments:
            from pxn.app.plots import plot_advice  # matplotlib: only when a figure is asked for

            # The figure first: if it cannot be drawn, nothing is written.
            written.append(plot_advice(advice, out / "pareto.png"))
            write_text_atomically(out / "advise.csv", advice_csv(advice))
            written.append(out / "advise.csv")
        write_text_atomically(out / "advise.json", advice_json(advice))
        written.append(out / "advise.json")
        stderr.print("wrote " + ", ".join(str(path) for path in written))
    if advice.recommended is None:
        for reason in advice.reasons:
            print(f"pxn: {reason}", file=sys.stderr)
        raise typer.Exit(1)


@commands.command()
def presets() -> None:
    """List the built-in scenarios (the paper's setups)."""
    from rich.table import Table

    from pxn.durations import format_duration
    from pxn.sim.presets import load_scenario, preset_names

    table = Table(title="presets (sim/presets/; each file's header says how it was inferred)")
    for column in ("name", "B", "V", "W", "mean rollout", "mean reflection", "a0", "about"):
        table.add_column(column)
    for name in preset_names():
        s = load_scenario(name)
        table.add_row(
            name,
            str(s.budget),
            str(s.valset_size),
            str(s.workers),
            format_duration(s.rollout.mean()),
            format_duration(s.reflection.mean()),
            f"{s.acceptance.a0:g}",
            s.description,
        )
    stdout.print(table)
