"""The `pxn` command: parse, call a library function, print.

Errors of the user's making (`PxnError`) become one line on stderr and exit
code 2; nothing here computes anything itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from pxn.errors import PxnError

app = typer.Typer(
    help="Predict, measure and calibrate the wall-clock of batched (P x N) GEPA runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Tables are wide: when piped, do not squeeze them to 80 columns.
stdout = Console() if sys.stdout.isatty() else Console(width=160)
stderr = Console(stderr=True)

DEFAULT_JOBS = min(2, os.cpu_count() or 1)
PAPER_SHAPES = "single,2x1,2x2,4x1,2x4,8x1,2x8,4x4,8x2"

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


def run_sweep(scenario, shapes, reps: int, jobs: int):
    from pxn.sim.predict import sweep, total_replicates

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    ) as progress:
        task = progress.add_task("simulating", total=total_replicates(shapes, reps))
        return sweep(scenario, shapes, reps, jobs, on_progress=lambda n: progress.advance(task, n))


@app.command()
def simulate(
    scenario: ScenarioArg,
    shape: Annotated[str, typer.Option("--shape", help="PxN, e.g. 2x2, or 'single'.")] = "single",
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = 1,
    workers: Workers = None,
    budget: Budget = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Also write replicate 0 as a trace (JSONL).")
    ] = None,
) -> None:
    """Predict one shape: wall-clock with interval, iterations, stages, closed form."""
    from pxn.report import predictions_table, stage_table
    from pxn.scenario import Shape

    the_shape = Shape.parse(shape)
    the_scenario = scenario_with_overrides(scenario, seed, workers, budget)
    if trace is not None and trace.exists():
        raise PxnError(f"--trace {trace} already exists; choose a new path")
    [prediction] = run_sweep(the_scenario, [the_shape], reps, jobs)
    stdout.print(predictions_table(the_scenario, [prediction]))
    stdout.print(stage_table(prediction))
    if trace is not None:
        from pxn.sim.model import simulate_once
        from pxn.trace import TraceWriter

        trace.parent.mkdir(parents=True, exist_ok=True)
        with TraceWriter(trace) as writer:
            simulate_once(the_scenario, the_shape, 0, writer)
        stdout.print(f"trace of replicate 0: {trace}")


@app.command(name="sweep")
def sweep_command(
    scenario: ScenarioArg,
    shapes: Annotated[str, typer.Option("--shapes", help="Comma-separated shapes.")] = PAPER_SHAPES,
    reps: Reps = 200,
    seed: Seed = None,
    jobs: Jobs = DEFAULT_JOBS,
    workers: Workers = None,
    budget: Budget = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Directory for sweep.csv, sweep.json, sweep.png.")
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="What to print: table, csv or json.")
    ] = "table",
) -> None:
    """Predict many shapes; print them and write CSV, JSON and a figure."""
    from pxn.files import write_text_atomically
    from pxn.plots import plot_sweep
    from pxn.report import predictions_csv, predictions_json, predictions_table
    from pxn.scenario import parse_shapes

    if output_format not in ("table", "csv", "json"):
        raise PxnError(f"--format is table, csv or json: got {output_format!r}")
    the_shapes = parse_shapes(shapes)
    the_scenario = scenario_with_overrides(scenario, seed, workers, budget)
    predictions = run_sweep(the_scenario, the_shapes, reps, jobs)
    if output_format == "table":
        stdout.print(predictions_table(the_scenario, predictions))
    elif output_format == "csv":
        sys.stdout.write(predictions_csv(predictions))
    else:
        sys.stdout.write(predictions_json(the_scenario, predictions) + "\n")
    if out is not None:
        write_text_atomically(out / "sweep.csv", predictions_csv(predictions))
        write_text_atomically(out / "sweep.json", predictions_json(the_scenario, predictions))
        figure = plot_sweep(the_scenario, predictions, out / "sweep.png")
        stderr.print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {figure}")


@app.command()
def presets() -> None:
    """List the built-in scenarios (the paper's setups)."""
    from rich.table import Table

    from pxn.report import format_duration
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


def main() -> None:
    # Typer (in standalone mode) reports bad flags itself with exit code 2;
    # our own input errors arrive here as PxnError.
    try:
        app()
    except PxnError as exc:
        print(f"pxn: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("pxn: interrupted", file=sys.stderr)
        sys.exit(130)
