"""The `pxn` command: parse, call the Python API (pxn.api) or a library, print.

A flag's old spelling is made current first, with a line on stderr
(options.in_current_spelling). Errors of the user's making (`PxnError`)
become one line on stderr and exit code 2, named by the flag that carried
the bad input as the user spelled it (options.in_flag_terms); nothing here
computes anything itself. A reader that stops reading (`| head`)
costs the rest of the output, never the command's work (app/streams.py). The
commands live in app/commands/, `pxn X` in X.py (a group's subcommands in the
group's module); the options they share in app/options.py.
"""

from __future__ import annotations

import sys

import typer

from pxn.app.commands import (
    advise,
    calibrate,
    conformance,
    lm,
    plot,
    presets,
    run,
    simulate,
    sweep,
    tasks,
    trace,
    validate,
)
from pxn.app.options import in_current_spelling, in_flag_terms
from pxn.app.streams import readers_may_leave
from pxn.errors import PxnError

app = typer.Typer(
    help="Predict, measure and calibrate the wall-clock of batched (P x N) GEPA runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# In this order in --help: predicting, then measured runs, then real runs.
for command in (simulate, sweep, advise, presets, calibrate, validate):
    app.add_typer(command.commands)
app.add_typer(plot.commands, name="plot")
app.add_typer(trace.commands, name="trace")
app.add_typer(run.commands)
app.add_typer(tasks.commands)
app.add_typer(lm.commands, name="lm")
app.add_typer(conformance.commands)


def main(argv: list[str] | None = None) -> None:
    """Run `pxn` on `argv` (the command line's arguments when None); always exits."""
    args = sys.argv[1:] if argv is None else argv
    current, notices = in_current_spelling(args)
    # Typer (in standalone mode) reports bad flags itself with exit code 2;
    # our own input errors arrive here as PxnError.
    with readers_may_leave():
        for notice in notices:
            print(notice, file=sys.stderr)
        try:
            app(args=current, prog_name="pxn")
        except PxnError as exc:  # named by the flag as the user spelled it
            print(f"pxn: error: {in_flag_terms(exc, args)}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            print("pxn: interrupted", file=sys.stderr)
            sys.exit(130)
