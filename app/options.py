"""The flags of `pxn`: one vocabulary, the options commands share, the flag of each input.

Every flag of every command is one of VOCABULARY's, one spelling per thing. A
library error names its input in the domain's words (`PxnError.subject`:
"replicates", "ray address"); the CLI says the flag instead when the user gave
that flag. Most subjects are their flag's name
(budget -> --budget, LM servers -> --lm-servers); where a command spells it
otherwise, the maps below say so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from pxn.errors import PxnError

ScenarioArg = Annotated[
    str, typer.Argument(help="A scenario TOML file, or a preset: livebench-math, hover.")
]
Reps = Annotated[int, typer.Option(help="Simulated replicates per shape.")]
ValidateReps = Annotated[int, typer.Option(help="Simulated replicates per run's setup.")]
TracesArg = Annotated[
    list[Path], typer.Argument(help="Trace files (trace.jsonl) or run directories (runs/NAME/).")
]
ScenarioOpt = Annotated[str, typer.Option(help="The calibrated scenario TOML (or a preset name).")]
Seed = Annotated[
    int | None, typer.Option(help="Base seed (default: the scenario's); same seed, same bits.")
]
Jobs = Annotated[int, typer.Option(help="Processes to spread replicates over.")]
Workers = Annotated[int | None, typer.Option(help="Override the worker pool W.")]
BUDGET_HELP = (
    "metric calls (400), or dspy.GEPA's auto:light, auto:medium, auto:heavy or full-evals:N"
)
Budget = Annotated[str | None, typer.Option(help=f"Override the budget B: {BUDGET_HELP}.")]
Predictors = Annotated[
    int | None,
    typer.Option(
        help="The DSPy program's predictors, for an auto budget (default: the scenario's, or 1)."
    ),
]
BUDGETS_HELP = (
    "1000,2000,4000, or LOW..HIGH (LOW doubled until HIGH: 500..4000 is 500,1000,2000,4000); "
    "dspy.GEPA's auto:LEVEL and full-evals:N too"
)
MinProposals = Annotated[
    int,
    typer.Option(
        help="Warn of a budget affording fewer proposals than this after the seed's validation."
    ),
]
Minibatch = Annotated[int | None, typer.Option(help="Override the reflection minibatch b.")]
Deadline = Annotated[str | None, typer.Option(help="Wall-clock limit: 3h, 90m, 1h30m, 600s.")]
MaxDollars = Annotated[float | None, typer.Option(help="Dollar cap (the scenario needs prices).")]
Backend = Annotated[
    str,
    typer.Option(help="local (processes on this machine) or ray (Ray tasks; needs the ray extra)."),
]
Address = Annotated[
    str | None,
    typer.Option(
        help="HOST:PORT of a running Ray head (`ray start --head`); "
        "without it --backend ray starts a private local Ray with --jobs CPUs."
    ),
]
Format = Annotated[str, typer.Option("--format", help="What to print: table, csv or json.")]
Out = Annotated[
    Path | None, typer.Option(help="Directory to write the result into: CSV, JSON and a figure.")
]
Wide = Annotated[
    bool, typer.Option("--wide", help="Show every column, however wide the table gets.")
]


# Every long flag of every command, and the one thing it names: one spelling per thing,
# in the words of docs/glossary.md (tests/test_app_vocabulary.py holds the commands to it).
VOCABULARY = {
    "--budget": "B, the budget: metric calls, or dspy.GEPA's auto level or full evaluations "
    "(in advise: the budgets to compare)",
    "--budgets": "budgets B, a list: a learning curve's points",
    "--min-proposals": "the fewest proposals a budget should afford; fewer are warned of",
    "--target-score": "a test score to reach in 90% of runs",
    "--predictors": "the DSPy program's predictors, which an auto budget grows with",
    "--workers": "W, rollout workers (in advise and conformance: the pools to try)",
    "--minibatch": "b, the reflection minibatch (in advise: the sizes to try)",
    "--reflection-concurrency": "C, reflections at once",
    "--shape": "a shape P x N",
    "--shapes": "shapes P x N, a list",
    "--p": "P, parents per iteration: the values to try",
    "--n": "N, children per parent: the values to try",
    "--reps": "replicates: simulated runs per shape, allocation or measured run's setup",
    "--draws": "parameter draws of a calibrated scenario",
    "--seed": "the seed",
    "--jobs": "local processes to spread the work over",
    "--backend": "where the work runs: local or ray",
    "--address": "a running Ray head, HOST:PORT",
    "--lm-servers": "LM servers: the calls the local LM pool serves at once",
    "--task-model": "the task model, as litellm names it",
    "--reflection-model": "the reflection model, as litellm names it",
    "--api-base": "the base URL of self-hosted models",
    "--task": "the task a real run optimises",
    "--selection": "which children are validated in full: all, best or topk:K",
    "--scenario": "the scenario: a TOML file or a preset",
    "--summaries": "a file of run summaries to infer a scenario from",
    "--wall-clock": "a past run's wall-clock, as people write durations",
    "--log": "a file of a past run's log lines",
    "--tracking-uri": "the MLflow tracking store a past run was logged to",
    "--name": "the calibrated scenario's name",
    "--latency": "how latencies are fitted: auto, empirical or a family",
    "--prefix-cache": "whether the reflections' LM servers keep the last prompt",
    "--search": "how proposals fare: the quality model or acceptance rates",
    "--strict": "refuse, with exit code 1, a scenario that does not reproduce its own runs",
    "--deadline": "a wall-clock limit",
    "--max-dollars": "a dollar cap",
    "--objective": "what advise minimises: time or cost, or maximises: score",
    "--full-grid": "every allocation simulated in full, no race",
    "--runs": "real runs per shape and W",
    "--time-scale": "the synthetic calls' seconds per scenario second",
    "--iterations": "the last iteration drawn",
    "--probe-timeout": "seconds a model has to answer its first tiny call",
    "--merge": "gepa's merge of two candidates sharing an ancestor, turned on",
    "--max-merges": "the most merges gepa accepts in a run",
    "--api": "gepa's entry point a real run drives: gepa.optimize or optimize_anything",
    "--resume": "an interrupted run's directory, to continue",
    "--overwrite": "replace the run already in the run directory",
    "--progress": "show the live progress line",
    "--no-progress": "hide the live progress line",
    "--all": "every recorded LM pool",
    "--format": "what to print: table, csv or json",
    "--wide": "every column of a table",
    "--out": "a directory to write into",
    "--output": "a file to write",
    "--plots": "a directory for fit figures",
    "--trace": "a trace file to write",
    "--chrome": "a Chrome trace file to write",
}

# Subjects spelled otherwise by every command's flags ...
FLAGS = {
    "replicates": "--reps",
    "dollar cap": "--max-dollars",
    "ray address": "--address",
    "eval backend": "--backend",
    "b": "--minibatch",
    "search model": "--search",
    "min proposals": "--min-proposals",
    "target score": "--target-score",
}
# ... and by one command's (its first word on the command line).
COMMAND_FLAGS = {
    "sweep": {"shape": "--shapes"},
    "run": {"run directory": "--out"},
    "conformance": {"shape": "--shapes"},
}


def flag_for(subject: str, command: str) -> str:
    """The flag that carries `subject` in `command` (ray address -> --address in sweep)."""
    named = FLAGS | COMMAND_FLAGS.get(command, {})
    return named.get(subject) or "--" + re.sub(r"[ _]", "-", subject.lower())


def in_flag_terms(error: PxnError, argv: list[str]) -> PxnError:
    """The error named by the flag that carried its input, when the user gave that flag."""
    if error.subject is None or not argv:
        return error
    flag = flag_for(error.subject, argv[0])
    given = any(arg == flag or arg.startswith(flag + "=") for arg in argv)
    return error.naming(flag) if given else error
