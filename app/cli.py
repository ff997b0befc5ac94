"""The `pxn` command: parse, call a library function, print.

Errors of the user's making (`PxnError`) become one line on stderr and exit
code 2; nothing here computes anything itself. The commands live in
app/commands/, one module per group.
"""

from __future__ import annotations

import re
import sys

import typer

from pxn.app.commands import calibrate, lm, measure, predict
from pxn.errors import PxnError

app = typer.Typer(
    help="Predict, measure and calibrate the wall-clock of batched (P x N) GEPA runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(predict.commands)
app.add_typer(calibrate.commands)
app.add_typer(calibrate.plot_commands, name="plot")
app.add_typer(calibrate.trace_commands, name="trace")
app.add_typer(measure.commands)
app.add_typer(lm.commands, name="lm")


def in_flag_terms(error: PxnError, argv: list[str]) -> PxnError:
    """The error named by the flag that carried its input, when one did (shape -> --shape)."""
    if error.subject is None:
        return error
    flag = "--" + re.sub(r"[ _]", "-", error.subject)
    given = any(arg == flag or arg.startswith(flag + "=") for arg in argv)
    return error.naming(flag) if given else error


def main() -> None:
    # Typer (in standalone mode) reports bad flags itself with exit code 2;
    # our own input errors arrive here as PxnError.
    try:
        app()
    except PxnError as exc:
        print(f"pxn: error: {in_flag_terms(exc, sys.argv[1:])}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("pxn: interrupted", file=sys.stderr)
        sys.exit(130)
