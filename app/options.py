"""The options several commands share, and the flag that carries each input a library names.

A library error names its input in the domain's words (`PxnError.subject`:
"replicates", "ray address"); the CLI says the flag instead when the user gave
that flag. Most subjects are their flag's name (budget -> --budget, LM servers
-> --lm-servers); where a command spells it otherwise, the maps below say so.
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
Reps = Annotated[int, typer.Option("--reps", help="Simulated replicates per shape.")]
ValidateReps = Annotated[int, typer.Option("--reps", help="Simulated replicates per run's setup.")]
TracesArg = Annotated[
    list[Path], typer.Argument(help="Trace files (trace.jsonl) or run directories (runs/NAME/).")
]
ScenarioOpt = Annotated[
    str, typer.Option("--scenario", help="The calibrated scenario TOML (or a preset name).")
]
Seed = Annotated[
    int | None,
    typer.Option("--seed", help="Base seed (default: the scenario's); same seed, same bits."),
]
Jobs = Annotated[int, typer.Option("--jobs", help="Processes to spread replicates over.")]
Workers = Annotated[int | None, typer.Option("--workers", help="Override the worker pool W.")]
Budget = Annotated[
    int | None, typer.Option("--budget", help="Override the budget B (metric calls).")
]
Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="local (processes on this machine) or ray (Ray tasks; needs the ray extra).",
    ),
]
Address = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="HOST:PORT of a running Ray head (`ray start --head`); "
        "without it --backend ray starts a private local Ray with --jobs CPUs.",
    ),
]
Format = Annotated[str, typer.Option("--format", help="What to print: table, csv or json.")]
Out = Annotated[
    Path | None,
    typer.Option("--out", help="Directory to write the result into: CSV, JSON and a figure."),
]
Wide = Annotated[
    bool, typer.Option("--wide", help="Show every column, however wide the table gets.")
]


# Subjects spelled otherwise by every command's flags ...
FLAGS = {"replicates": "--reps", "dollar cap": "--max-dollars"}
# ... and by one command's (its first word on the command line).
COMMAND_FLAGS = {
    "simulate": {"ray address": "--address"},
    "sweep": {"ray address": "--address", "shape": "--shapes"},
    "advise": {"ray address": "--address"},
    "run": {"LM servers": "--servers", "run directory": "--out"},
    "lm": {"LM servers": "--servers"},
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
