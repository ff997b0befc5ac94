"""`pxn calibrate`: a scenario from traces or run summaries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import say, stderr, stdout
from pxn.api.running import DEFAULT_JOBS
from pxn.app.options import Address, Backend, Format, Jobs, flag_for
from pxn.app.output import Output, check_writable, refuse_overwriting_an_input
from pxn.errors import PxnError

commands = typer.Typer()
# What a trace or a past run may lack: the subjects of the errors that ask for its flag.
ASKED_FOR = ("workers", "reflection concurrency", "wall clock", "tracking uri")


@commands.command()
def calibrate(
    output: Annotated[Path, typer.Option("-o", "--output", help="Scenario TOML to write.")],
    traces: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Trace files (trace.jsonl) or run directories (runs/NAME/); or one past run: "
            "a gepa run_dir (dspy.GEPA's log_dir) as gepa wrote it, or mlflow:RUN_ID "
            "(mlflow:experiment:NAME for its latest run).",
            show_default=False,
        ),
    ] = None,
    summaries: Annotated[
        Path | None,
        typer.Option(
            help="Infer from run summaries instead of traces: a CSV or TOML of per-run figures "
            "(format: pydoc pxn.calibrate.summaries), by simulation-based inference."
        ),
    ] = None,
    jobs: Jobs = DEFAULT_JOBS,
    backend: Backend = "local",
    address: Address = None,
    plots: Annotated[
        Path | None, typer.Option(help="Directory for fit diagnostic figures.")
    ] = None,
    name: Annotated[str, typer.Option(help="The scenario's name.")] = "calibrated",
    latency: Annotated[
        str, typer.Option(help="auto (lowest AIC unless KS rejects it), empirical, or a family.")
    ] = "auto",
    lm_servers: Annotated[
        int | None,
        typer.Option(
            help="Calls the LM serves at once (a local pool of K servers), when the traces "
            "do not say; overrides them."
        ),
    ] = None,
    task_model: Annotated[
        str | None,
        typer.Option(
            help="Write the prices table for this model (as litellm names it, e.g. gpt-4.1-mini), "
            "priced from litellm's offline table."
        ),
    ] = None,
    reflection_model: Annotated[
        str | None, typer.Option(help="The reflection model's name, when not the task model.")
    ] = None,
    draws: Annotated[
        int | None,
        typer.Option(
            help="Parameter draws to write as the scenario's uncertainty (a bootstrap of the "
            "fits over runs and their iterations; default 100); 0 writes none.",
            show_default=False,
        ),
    ] = None,
    prefix_cache: Annotated[
        str,
        typer.Option(
            help="Whether the reflections' LM servers keep the prompt they served last "
            "(llama.cpp does), so a sibling reflection served next is faster: yes, no, or auto "
            "(yes for pxn's own local pool)."
        ),
    ] = "auto",
    search: Annotated[
        str,
        typer.Option(
            help="How proposals fare in the scenario: quality (the quality model, inferred "
            "from the traces' scores), rates (acceptance rates), or auto (quality when the "
            "traces hold scores)."
        ),
    ] = "auto",
    workers: Annotated[
        int | None,
        typer.Option(
            help="W, the rollouts the adapter ran at once, for runs recorded without "
            "workers=: needed when the adapter timed none of its rollouts."
        ),
    ] = None,
    wall_clock: Annotated[
        str | None,
        typer.Option(
            help="A past run's wall-clock (47min, 1h30m); without it, its MLflow run, its log "
            "or its files' own times give it."
        ),
    ] = None,
    reflection_concurrency: Annotated[
        int | None,
        typer.Option(help="C, the reflections a past batched gepa.optimize run made at once."),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            help="A past run's max_metric_calls, when its log does not say it (default: the "
            "metric calls it made)."
        ),
    ] = None,
    shape: Annotated[
        str | None, typer.Option(help="A past run's P x N, when its parents cannot tell it (2x2).")
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            help="A past dspy.GEPA run's log lines kept in a file (they carry their times)."
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            help="The MLflow store a past run was tracked in (sqlite:///mlflow.db, "
            "http://host:5000): its times are read from there."
        ),
    ] = None,
    output_format: Format = "table",
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit with code 1, writing nothing, when the scenario does not reproduce "
            "the runs it was fitted to (for scripts and CI).",
        ),
    ] = False,
) -> None:
    """Fit latencies, the search, overhead and tokens from traces (or infer them from run
    summaries); write a Scenario TOML."""
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.calibration import SUMMARIES_SAY_IT
    from pxn.api.calibration import calibrate as calibrate_scenario

    shown = Output.taken_from(flags)
    for written_here in ("output", "plots", "strict"):
        del flags[written_here]
    check_writable(output, "output")
    check_writable(plots, "plots", directory=True)
    inputs = [*(traces or []), *([summaries] if summaries else []), *([log] if log else [])]
    refuse_overwriting_an_input(output, [p for p in inputs if not str(p).startswith("mlflow:")])
    if summaries is not None and traces:
        raise PxnError("give trace files or --summaries, not both")
    if summaries is not None and plots is not None:
        raise PxnError(SUMMARIES_SAY_IT, subject="plots")
    if log is not None and not log.is_file():
        raise PxnError(f"is not a file: {log}", subject="--log")
    if summaries is None and not traces:
        raise PxnError("give trace files (or run directories), or --summaries FILE")
    try:
        result = calibrate_scenario(**flags, progress=True)
    except PxnError as exc:  # what the traces or the run lack: this command's flag gives it
        if exc.subject not in ASKED_FOR:
            raise
        raise exc.naming(flag_for(exc.subject, "calibrate")) from None
    if strict and not result.reproduces:
        shown.show(result.report())
        say(f"not written: {output} (--strict: the scenario does not reproduce its runs)", stderr)
        raise typer.Exit(1)
    # Written before the report is printed: a reader that stops early (`| head`) loses no work.
    result.save(output)
    shown.show(result.report())
    say(f"wrote {output}", stderr if output_format != "table" else stdout)
    if plots is not None:
        from pxn.api.plots import save_figure

        for fit in result.fits():
            path = plots / f"fit_{fit.replace(' ', '_')}.png"
            say(f"wrote {save_figure(result.figure(fit), path)}")
