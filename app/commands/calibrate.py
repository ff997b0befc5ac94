"""Measured runs: `pxn calibrate`, `pxn validate`, `pxn plot ...`, `pxn trace export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import WorkProgress, print_set_aside, progress_bar, say, stderr
from pxn.app.interrupts import stopped_by_signals
from pxn.app.options import DEFAULT_JOBS, Format, Jobs, Out, Wide
from pxn.app.output import Output, ensure_writable_outputs
from pxn.errors import PxnError
from pxn.fields import whole
from pxn.trace import TRACE_NAME

commands = typer.Typer()
plot_commands = typer.Typer(help="Figures of measured and simulated runs.", no_args_is_help=True)
trace_commands = typer.Typer(help="Convert traces for other tools.", no_args_is_help=True)

TracesArg = Annotated[
    list[Path], typer.Argument(help="Trace files (trace.jsonl) or run directories (runs/NAME/).")
]
ScenarioOpt = Annotated[
    str, typer.Option("--scenario", help="The calibrated scenario TOML (or a preset name).")
]
# Beyond this a scenario loads slowly (every draw is validated, ~2 ms each) and no
# prediction runs enough replicates to use its draws.
MAX_DRAWS = 10_000

ValidateReps = Annotated[int, typer.Option("--reps", help="Simulated replicates per run's setup.")]


@commands.command()
def calibrate(
    output: Annotated[Path, typer.Option("-o", "--output", help="Scenario TOML to write.")],
    traces: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Trace files (trace.jsonl) or run directories (runs/NAME/).", show_default=False
        ),
    ] = None,
    summaries: Annotated[
        Path | None,
        typer.Option(
            "--summaries",
            help="Infer from run summaries instead of traces: a CSV or TOML of per-run figures "
            "(format: pydoc pxn.calibrate.summaries), by simulation-based inference.",
        ),
    ] = None,
    jobs: Jobs = DEFAULT_JOBS,
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
    draws: Annotated[
        int | None,
        typer.Option(
            "--draws",
            help="Parameter draws to write as the scenario's uncertainty (a bootstrap of the "
            "fits over runs and their iterations; default 100); 0 writes none.",
            show_default=False,
        ),
    ] = None,
    prefix_cache: Annotated[
        str,
        typer.Option(
            "--prefix-cache",
            help="Whether the reflections' LM servers keep the prompt they served last "
            "(llama.cpp does), so a sibling reflection served next is faster: yes, no, or auto "
            "(yes for pxn's own local pool).",
        ),
    ] = "auto",
) -> None:
    """Fit latencies, acceptance, overhead and tokens from traces (or infer them from run
    summaries); write a Scenario TOML."""
    from pxn.api.calibration_report import calibration_header, calibration_lines
    from pxn.calibrate.scenario_from_traces import calibrate_traces

    ensure_writable_outputs(files={"output": output}, directories={"plots": plots})
    refuse_overwriting_an_input(output, [*(traces or []), *([summaries] if summaries else [])])
    whole(jobs, "jobs")
    if not name.strip():
        raise PxnError("must not be empty: it names the scenario in every report", subject="name")
    if draws is not None and draws > MAX_DRAWS:
        raise PxnError(f"must be at most {MAX_DRAWS} (each draw is checked whenever the "
                       f"scenario loads): got {draws}", subject="draws")  # fmt: skip
    if summaries is not None:
        if traces:
            raise PxnError("give trace files or --summaries, not both")
        given = trace_only_flags(
            plots, latency, lm_servers, task_model, reflection_model, draws, prefix_cache
        )
        if given:
            raise PxnError(
                f"{given[0]} applies to traces; with --summaries the summaries file's [setup] "
                "and [inference] tables say it (format: pydoc pxn.calibrate.summaries)"
            )
        calibrate_from_summaries(summaries, output, name, jobs)
        return
    if not traces:
        raise PxnError("give trace files (or run directories), or --summaries FILE")
    if prefix_cache not in PREFIX_CACHE:
        raise PxnError(f"must be auto, yes or no: got {prefix_cache!r}", subject="--prefix-cache")
    calibration = calibrate_traces(
        traces,
        name=name,
        latency=latency,
        lm_servers=lm_servers,
        task_model=task_model,
        reflection_model=reflection_model,
        draws=100 if draws is None else draws,
        prefix_cache=PREFIX_CACHE[prefix_cache],
    )
    # Written before the report is printed: a reader that stops early (`| head`) loses no work.
    calibration.scenario.save(output, calibration_header(calibration))
    for line in calibration_lines(calibration):
        say(line)
    say(f"wrote {output}")
    if plots is not None:
        from pxn.api.plots import plot_latency_fit

        fits = [calibration.rollout, calibration.reflection]
        fits += [f for f in calibration.rollout_by_phase.values() if f.n >= 2]
        for fit in fits:
            figure = plot_latency_fit(fit, plots / f"fit_{fit.what.replace(' ', '_')}.png")
            say(f"wrote {figure}")


def refuse_overwriting_an_input(output: Path, inputs: list[Path], subject: str = "output") -> None:
    """What a command writes must not replace a trace (or summaries file) it reads."""
    for given in inputs:
        if output.resolve() in (given.resolve(), (given / TRACE_NAME).resolve()):
            raise PxnError(f"{output} is one of the inputs; write elsewhere", subject=subject)


PREFIX_CACHE = {"auto": None, "yes": True, "no": False}


def trace_only_flags(
    plots, latency, lm_servers, task_model, reflection_model, draws, prefix_cache
) -> list[str]:
    """The flags given that only a calibration from traces reads."""
    given = {
        "--plots": plots is not None,
        "--latency": latency != "auto",
        "--lm-servers": lm_servers is not None,
        "--task-model": task_model is not None,
        "--reflection-model": reflection_model is not None,
        "--draws": draws is not None,
        "--prefix-cache": prefix_cache != "auto",
    }
    return [flag for flag, is_given in given.items() if is_given]


def calibrate_from_summaries(summaries: Path, output: Path, name: str, jobs: int) -> None:
    from pxn.calibrate.from_summaries import infer_from_summaries
    from pxn.calibrate.summaries import read_summaries
    from pxn.calibrate.summaries_report import generation_line, inference_header, inference_lines

    read = read_summaries(summaries)
    with progress_bar() as bar:  # on a terminal only, gone when done: errors stay one line
        task = bar.add_task("ABC-SMC", total=read.options.max_generations + 1)

        def told(generation) -> None:
            bar.update(task, advance=1, description=generation_line(generation))

        inference = infer_from_summaries(read, name, jobs, told)
    inference.scenario.save(output, inference_header(inference))
    for line in inference_lines(inference):
        say(line)
    say(f"wrote {output}")


def run_validation(scenario: str, runs: list[Path], reps: int, jobs: int):
    """Validate with a progress bar; Ctrl-C or SIGTERM stops it with one line."""
    from pxn.calibrate.validate import plan_validation, validate_planned
    from pxn.sim.presets import load_scenario

    plan = plan_validation(load_scenario(scenario), runs, reps)
    progress = WorkProgress("simulating", "replicates", plan.total_replicates)
    with stopped_by_signals(progress), progress:
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
    if out is not None:
        from pxn.api.plots import plot_sweep_vs_measured

        drawn = {"sweep_vs_measured.png": lambda path: plot_sweep_vs_measured(validation, path)}
        output.write(report, drawn)
    if output_format != "table":  # the table's caption says it
        say(summary_line(validation), stderr)


@plot_commands.command("sweep-vs-measured")
def plot_sweep_vs_measured_command(
    runs: TracesArg,
    scenario: ScenarioOpt,
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    reps: ValidateReps = 200,
    jobs: Jobs = DEFAULT_JOBS,
) -> None:
    """Measured runs against the simulated band and the closed form, shape by shape."""
    from pxn.api.plots import plot_sweep_vs_measured

    ensure_writable_outputs(files={"output": output})
    refuse_overwriting_an_input(output, runs)
    validation = run_validation(scenario, runs, reps, jobs)
    say(f"wrote {plot_sweep_vs_measured(validation, output)}")


@plot_commands.command("timeline")
def plot_timeline_command(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG to write.")],
    iterations: Annotated[
        int | None, typer.Option("--iterations", help="Show only up to this iteration's end.")
    ] = None,
) -> None:
    """One run as a Gantt chart of worker and reflection slots, coloured by phase."""
    from pxn.api.plots import plot_timeline
    from pxn.trace import read_one

    ensure_writable_outputs(files={"output": output})
    refuse_overwriting_an_input(output, [trace])
    if iterations is not None:
        whole(iterations, "iterations", least=0)
    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    say(f"wrote {plot_timeline(the_trace, output, iterations)}")


@trace_commands.command("export")
def trace_export(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    chrome: Annotated[
        Path, typer.Option("--chrome", help="Chrome trace JSON to write (open in Perfetto).")
    ],
) -> None:
    """Write a trace in Chrome's trace event format, for Perfetto or chrome://tracing."""
    from pxn.app.chrome import chrome_trace_json
    from pxn.files import write_text_atomically
    from pxn.trace import read_one

    ensure_writable_outputs(files={"chrome": chrome})
    refuse_overwriting_an_input(chrome, [trace], "chrome")
    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    write_text_atomically(chrome, chrome_trace_json(the_trace))
    say(f"wrote {chrome}")
