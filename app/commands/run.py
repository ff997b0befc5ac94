"""`pxn run`: a real batched gepa run, traced."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import say, stderr
from pxn.app.options import BUDGET_HELP
from pxn.app.output import check_writable
from pxn.runner.waits import PROBE_TIMEOUT

commands = typer.Typer()


@commands.command("run")
def run_command(
    out: Annotated[Path | None, typer.Option(help="Run directory to create, e.g. runs/x.")] = None,
    task: Annotated[
        str | None, typer.Option(help="Built-in task name (see `pxn tasks`) or module:function.")
    ] = None,
    shape: Annotated[str, typer.Option(help="PxN: P parents x N proposals.")] = "1x1",
    budget: Annotated[
        str, typer.Option(help=f"B: {BUDGET_HELP} (for the task's components as predictors).")
    ] = "40",
    workers: Annotated[int, typer.Option(help="Workers W: rollouts at once.")] = 2,
    selection: Annotated[str, typer.Option(help="all | best | topk:K")] = "all",
    minibatch: Annotated[
        int | None, typer.Option(help="Reflection minibatch b (default: the task's, 3).")
    ] = None,
    task_model: Annotated[
        str | None, typer.Option(help="litellm model (default: local pool).")
    ] = None,
    reflection_model: Annotated[
        str | None, typer.Option(help="litellm model (default: local pool).")
    ] = None,
    api_base: Annotated[str | None, typer.Option(help="Base URL for self-hosted models.")] = None,
    reflection_concurrency: Annotated[int | None, typer.Option(help="Cap C (default P*N).")] = None,
    seed: Annotated[int, typer.Option(help="gepa's seed.")] = 0,
    lm_servers: Annotated[int, typer.Option(help="Local LM servers.")] = 2,
    resume: Annotated[
        Path | None, typer.Option(help="Continue the interrupted run in this dir.")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the run already in --out.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show the live progress line.")] = True,
    backend: Annotated[
        str, typer.Option(help="local (W threads) or ray (W Ray workers; needs the ray extra).")
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT of a Ray head; without it --backend ray starts a private Ray."
        ),
    ] = None,
    merge: Annotated[
        bool,
        typer.Option(
            "--merge",
            help="Turn on gepa's merge of two candidates sharing an ancestor (use_merge).",
        ),
    ] = False,
    max_merges: Annotated[
        int, typer.Option(help="With --merge: the most merges gepa accepts.")
    ] = 5,
    api: Annotated[
        str,
        typer.Option(
            help="gepa's entry point: gepa.optimize (pxn's adapter) or optimize_anything "
            "(the task as its evaluator)."
        ),
    ] = "gepa.optimize",
    probe_timeout: Annotated[
        float, typer.Option(help="Seconds each model gets to answer one tiny call first.")
    ] = PROBE_TIMEOUT,
) -> None:
    """Run real batched GEPA (gepa 0.1.4) and trace every rollout and reflection."""
    flags = dict(locals())  # first, while the flags are all that is local
    from pxn.api.runs import run

    check_writable(resume or out, "run directory", directory=True)
    result = run(**flags)
    if result.status == "finished":  # resuming a finished run: nothing was changed
        say(f"pxn: {result.message}")
        return
    for warning in result.warnings:
        say(f"pxn: warning: {warning}", stderr)
    if result.status != "completed":
        print(f"pxn: run {result.status}: {result.message}", file=sys.stderr)
        raise typer.Exit(130 if result.status == "interrupted" else 1)  # 130: as Ctrl-C's
    if result.message:  # a resume that had only the test split to score says so
        say(f"pxn: {result.message}")
    r = result.result
    say(
        f"{r['shape']} on {r['task']}: {r['iterations']} iterations, {r['accepted']}/"
        f"{r['proposals']} proposals accepted, {r['metric_calls']} metric calls, "
        f"{r['wall_clock_s']:.1f} s; best val {r['best_val_score']:.3f} "
        f"(seed {r['seed_val_score']:.3f})"
        + (f", test {r['test_score']:.3f}" if r["test_score"] is not None else "")
    )
    say(f"wrote {result.out / 'trace.jsonl'} and {result.out / 'result.json'}")
