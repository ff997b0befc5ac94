"""The `pxn` command: parse, call the Python API (pxn.api) or a library, print.

Errors of the user's making (`PxnError`) become one line on stderr and exit
code 2, named by the flag that carried the bad input (options.in_flag_terms),
and so do the command line's own (an unknown flag, a missing argument);
nothing here computes anything itself. A reader that stops reading (`| head`)
costs the rest of the output, never the command's work (app/streams.py). The
commands live in app/commands/, `pxn X` in X.py (a group's subcommands in the
group's module); the options they share in app/options.py.
"""

from __future__ import annotations

import sys

import typer

# typer 0.29 carries its own click and does not re-export its parse errors.
from typer._click.exceptions import NoArgsIsHelpError, UsageError

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
from pxn.app.options import in_flag_terms
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
    # Not in click's standalone mode, so what it cannot parse (an unknown flag, a
    # missing argument) reaches us and is one line, as our own input errors are.
    with readers_may_leave():
        try:
            code = app(args=args, prog_name="pxn", standalone_mode=False)
        except PxnError as exc:  # named by the flag the user gave
            print(f"pxn: error: {in_flag_terms(exc, args)}", file=sys.stderr)
            sys.exit(2)
        except NoArgsIsHelpError as exc:  # `pxn`, or a group, alone: its help
            help_text = exc.format_message()  # rich's help is printed as it is made
            if help_text.strip():
                print(help_text)
            sys.exit(2)
        except UsageError as exc:
            print(f"pxn: error: {usage_line(exc)}", file=sys.stderr)
            sys.exit(2)
        except (KeyboardInterrupt, typer.Abort):
            print("pxn: interrupted", file=sys.stderr)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


def usage_line(error: UsageError) -> str:
    """Click's complaint in one line, with where to read the command's flags."""
    message = error.format_message().replace("\n", " ").rstrip(".")
    command = error.ctx.command_path if error.ctx is not None else "pxn"
    return f"{message[:1].lower()}{message[1:]} (see {command} --help)"
