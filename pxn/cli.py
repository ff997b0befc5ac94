"""The `pxn` command: parse, call a library function, print.

Errors of the user's making (`PxnError`) become one line on stderr and exit
code 2; nothing here computes anything itself.
"""

from __future__ import annotations

import sys

import click
import typer

from pxn.errors import PxnError

app = typer.Typer(
    help="Predict, measure and calibrate the wall-clock of batched (P x N) GEPA runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except click.ClickException as exc:  # bad flags: click's own one-line usage error
        exc.show()
        sys.exit(2)
    except PxnError as exc:
        print(f"pxn: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("pxn: interrupted", file=sys.stderr)
        sys.exit(130)
    except click.exceptions.Abort:
        print("pxn: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
