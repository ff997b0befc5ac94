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


def progress_bar() -> Progress:
    """Replicates done out of all, on stderr, gone when the work is."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


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


@app.command()
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
    from pxn.report import predictions_table, stage_table
    from pxn.scenario import Shape

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


@app.command(name="sweep")
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
    from pxn.files import write_text_atomically
    from pxn.report import predictions_csv, predictions_json, predictions_table
    from pxn.scenario import parse_shapes

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
        from pxn.plots import plot_sweep  # matplotlib: only when a figure is asked for

        write_text_atomically(out / "sweep.csv", predictions_csv(predictions))
        write_text_atomically(out / "sweep.json", predictions_json(the_scenario, predictions))
        figure = plot_sweep(the_scenario, predictions, out / "sweep.png")
        stderr.print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {figure}")


@app.command(name="advise")
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
    from pxn.advise_report import advice_csv, advice_json, advice_table, describe, headline
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
            from pxn.plots import plot_advice  # matplotlib: only when a figure is asked for

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


@app.command()
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


# --- calibration and validation (pxn.calibrate) ---

plot_app = typer.Typer(help="Figures of measured and simulated runs.", no_args_is_help=True)
trace_app = typer.Typer(help="Convert traces for other tools.", no_args_is_help=True)
app.add_typer(plot_app, name="plot")
app.add_typer(trace_app, name="trace")

TracesArg = Annotated[
    list[Path], typer.Argument(help="Trace files (trace.jsonl) or run directories (runs/NAME/).")
]
ScenarioOpt = Annotated[
    str, typer.Option("--scenario", help="The calibrated scenario TOML (or a preset name).")
]
ValidateReps = Annotated[int, typer.Option("--reps", help="Simulated replicates per run's setup.")]


def print_set_aside(rejected: list[str], skipped: list[str]) -> None:
    for reason in rejected:
        stderr.print(f"set aside: {reason}", markup=False, highlight=False)
    if skipped:
        stderr.print(
            f"skipped {len(skipped)} unusable trace line(s); first: {skipped[0]}",
            markup=False,
            highlight=False,
        )


@app.command()
def calibrate(
    traces: TracesArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Scenario TOML to write.")],
    plots: Annotated[
        Path | None, typer.Option("--plots", help="Directory for fit diagnostic figures.")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The scenario's name.")] = "calibrated",
    latency: Annotated[
        str,
        typer.Option(
            "--latency", help="auto (lowest AIC unless KS rejects it), empirical, or a family."
        ),
    ] = "auto",
    lm_servers: Annotated[
        int | None,
        typer.Option(
            "--lm-servers",
            help="Calls the LM serves at once (a local pool of K servers), when the traces "
            "do not say; overrides them.",
        ),
    ] = None,
    task_model: Annotated[
        str | None,
        typer.Option(
            "--task-model",
            help="Write the prices table for this model (as litellm names it, e.g. gpt-4.1-mini), "
            "priced from litellm's offline table.",
        ),
    ] = None,
    reflection_model: Annotated[
        str | None,
        typer.Option(
            "--reflection-model", help="The reflection model's name, when not the task model."
        ),
    ] = None,
) -> None:
    """Fit latencies, acceptance, overhead and tokens from traces; write a Scenario TOML."""
    from pxn.calibrate.report import calibration_header, calibration_lines
    from pxn.calibrate.scenario_from_traces import calibrate_traces

    calibration = calibrate_traces(
        traces,
        name=name,
        latency=latency,
        lm_servers=lm_servers,
        task_model=task_model,
        reflection_model=reflection_model,
    )
    for line in calibration_lines(calibration):
        stdout.print(line, markup=False, highlight=False, soft_wrap=True)
    calibration.scenario.save(output, calibration_header(calibration))
    stdout.print(f"wrote {output}", markup=False, highlight=False)
    if plots is not None:
        from pxn.plots import plot_latency_fit

        fits = [calibration.rollout, calibration.reflection]
        fits += [f for f in calibration.rollout_by_phase.values() if f.n >= 2]
        for fit in fits:
            figure = plot_latency_fit(fit, plots / f"fit_{fit.what.replace(' ', '_')}.png")
            stdout.print(f"wrote {figure}", markup=False, highlight=False)


def run_validation(scenario: str, runs: list[Path], reps: int, jobs: int):
    from pxn.calibrate.validate import validate_runs
    from pxn.sim.presets import load_scenario

    validation = validate_runs(load_scenario(scenario), runs, reps, jobs)
    print_set_aside(validation.rejected, validation.skipped_lines)
    return validation


@app.command()
def validate(
    runs: TracesArg,
    scenario: ScenarioOpt,
    reps: ValidateReps = 200,
    jobs: Jobs = DEFAULT_JOBS,
    output_format: Annotated[
        str, typer.Option("--format", help="What to print: table, csv or json.")
    ] = "table",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Directory for validation.csv, .json and sweep_vs_measured.png."
        ),
    ] = None,
) -> None:
    """Set measured runs beside the simulator's and the closed form's predictions."""
    from pxn.files import write_text_atomically
    from pxn.validation_report import (
        summary_line,
        validation_csv,
        validation_json,
        validation_table,
    )

    if output_format not in ("table", "csv", "json"):
        raise PxnError(f"--format is table, csv or json: got {output_format!r}")
    validation = run_validation(scenario, runs, reps, jobs)
    if output_format == "table":
        stdout.print(validation_table(validation))
    elif output_format == "csv":
        sys.stdout.write(validation_csv(validation))
    else:
        sys.stdout.write(validation_json(validation) + "\n")
    if out is not None:
        from pxn.plots import plot_sweep_vs_measured

        write_text_atomically(out / "validation.csv", validation_csv(validation))
        write_text_atomically(out / "validation.json", validation_json(validation))
        figure = plot_sweep_vs_measured(validation, out / "sweep_vs_measured.png")
        stderr.print(f"wrote {out / 'validation.csv'}, {out / 'validation.json'}, {figure}")
    if output_format != "table":
        stderr.print(summary_line(validation), markup=False, highlight=False)


@plot_app.command("sweep-vs-measured")
def plot_sweep_vs_measured_command(
    runs: TracesArg,
    scenario: ScenarioOpt,
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    reps: ValidateReps = 200,
    jobs: Jobs = DEFAULT_JOBS,
) -> None:
    """Measured runs against the simulated band and the closed form, shape by shape."""
    from pxn.plots import plot_sweep_vs_measured

    validation = run_validation(scenario, runs, reps, jobs)
    stdout.print(f"wrote {plot_sweep_vs_measured(validation, output)}", markup=False)


@plot_app.command("timeline")
def plot_timeline_command(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    iterations: Annotated[
        int | None, typer.Option("--iterations", help="Show only up to this iteration's end.")
    ] = None,
) -> None:
    """One run as a Gantt chart of worker and reflection slots, coloured by phase."""
    from pxn.calibrate.load import read_one
    from pxn.plots import plot_timeline

    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    stdout.print(f"wrote {plot_timeline(the_trace, output, iterations)}", markup=False)


@trace_app.command("export")
def trace_export(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    chrome: Annotated[
        Path, typer.Option("--chrome", help="Chrome trace JSON to write (open in Perfetto).")
    ],
) -> None:
    """Write a trace in Chrome's trace event format, for Perfetto or chrome://tracing."""
    from pxn.calibrate.chrome import chrome_trace_json
    from pxn.calibrate.load import read_one
    from pxn.files import write_text_atomically

    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    write_text_atomically(chrome, chrome_trace_json(the_trace))
    stdout.print(f"wrote {chrome}", markup=False)


# --- real runs (pxn.runner) ---

lm_app = typer.Typer(help="The local LM pool (llama.cpp + SmolLM2-135M).", no_args_is_help=True)
app.add_typer(lm_app, name="lm")


@app.command("run")
def run_command(
    out: Annotated[
        Path | None, typer.Option("--out", help="Run directory to create, e.g. runs/x.")
    ] = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help="Built-in task name (see `pxn tasks`) or module:function."),
    ] = None,
    shape: Annotated[str, typer.Option("--shape", help="PxN: P parents x N mutations.")] = "1x1",
    budget: Annotated[int, typer.Option("--budget", help="Metric calls (B).")] = 40,
    workers: Annotated[int, typer.Option("--workers", help="Rollout worker slots (W).")] = 2,
    selection: Annotated[str, typer.Option("--selection", help="all | best | topk:K")] = "all",
    minibatch: Annotated[
        int | None,
        typer.Option("--minibatch", help="Reflection minibatch b (default: the task's, 3)."),
    ] = None,
    task_lm: Annotated[
        str | None, typer.Option("--task-lm", help="litellm model (default: local pool).")
    ] = None,
    reflection_lm: Annotated[
        str | None, typer.Option("--reflection-lm", help="litellm model (default: local pool).")
    ] = None,
    api_base: Annotated[
        str | None, typer.Option("--api-base", help="Base URL for self-hosted models.")
    ] = None,
    reflection_concurrency: Annotated[
        int | None, typer.Option("--reflection-concurrency", help="Cap C (default P*N).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="gepa's seed.")] = 0,
    servers: Annotated[int, typer.Option("--servers", help="Local LM servers.")] = 2,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Continue the interrupted run in this dir.")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show the live progress line.")] = True,
    eval_backend: Annotated[
        str,
        typer.Option(
            "--eval-backend", help="local (W threads) or ray (W Ray workers; needs the ray extra)."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="HOST:PORT of a Ray head; without it --eval-backend ray starts a private Ray.",
        ),
    ] = None,
) -> None:
    """Run real batched GEPA (gepa 0.1.4) and trace every rollout and reflection."""
    from pxn.runner.config import RunConfig, check_out, plan

    if resume is None and out is None:
        raise PxnError("give --out runs/NAME for a new run, or --resume runs/NAME")
    config = RunConfig(
        out=str(resume or out),
        task=task,
        shape=shape,
        budget=budget,
        workers=workers,
        selection=selection,
        minibatch=minibatch,
        task_lm=task_lm,
        reflection_lm=reflection_lm,
        api_base=api_base,
        reflection_concurrency=reflection_concurrency,
        seed=seed,
        servers=servers,
        progress=progress,
        eval_backend=eval_backend,
        ray_address=ray_address,
    )
    if resume is None:  # bad flags fail now, before litellm's slow import
        check_out(config, resume=False)
        plan(config)
    from pxn.runner.run import run_gepa

    result = run_gepa(config, resume=resume is not None)
    for warning in result.warnings:
        stderr.print(f"pxn: warning: {warning}", markup=False)
    if result.status != "completed":
        print(f"pxn: run {result.status}: {result.message}", file=sys.stderr)
        raise typer.Exit(1)
    r = result.result
    stdout.print(
        f"{r['shape']} on {r['task']}: {r['iterations']} iterations, {r['accepted']}/"
        f"{r['proposals']} proposals accepted, {r['metric_calls']} metric calls, "
        f"{r['wall_clock_s']:.1f} s; best val {r['best_val_score']:.3f} "
        f"(seed {r['seed_val_score']:.3f})"
        + (f", test {r['test_score']:.3f}" if r["test_score"] is not None else ""),
        markup=False,
    )
    stdout.print(
        f"wrote {result.out / 'trace.jsonl'} and {result.out / 'result.json'}", markup=False
    )


@app.command("tasks")
def tasks_command() -> None:
    """List the built-in tasks and their split sizes."""
    from pxn.runner.tasks import builtin_tasks

    for name, make in builtin_tasks().items():
        task = make()
        sizes = ", ".join(f"{k} {v}" for k, v in task.splits().items())
        stdout.print(
            f"{name}: {task.description} ({sizes}; minibatch {task.minibatch})", markup=False
        )


@lm_app.command("serve")
def lm_serve(
    servers: Annotated[int, typer.Option("--servers", help="How many servers (K).")] = 2,
) -> None:
    """Start K local llama.cpp servers and keep them up until Ctrl-C (or `pxn lm stop`)."""
    import signal

    from pxn.runner.lm_pool import LMPool, pidfile_path

    with LMPool(servers, pidfile=pidfile_path()) as info:
        stdout.print(f"model: {info.model} (api_key: any string)", markup=False)
        for server in info.servers:
            stdout.print(f"  api_base: {server.api_base}  pid {server.pid}", markup=False)
        stdout.print("Ctrl-C or `pxn lm stop` stops the pool.", markup=False)
        # Block until a signal: SIGTERM (from `pxn lm stop` or a supervisor) ends us cleanly.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            pass


@lm_app.command("stop")
def lm_stop() -> None:
    """Stop the pool a `pxn lm serve` left running."""
    from pxn.runner.lm_pool import stop_standalone

    stopped = stop_standalone()
    stdout.print(f"stopped {len(stopped)} server(s)", markup=False)
