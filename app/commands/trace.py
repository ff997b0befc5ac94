"""`pxn trace ...`: traces converted for other tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pxn.api.console import print_set_aside, say
from pxn.app.output import ensure_writable_outputs, refuse_overwriting_an_input

commands = typer.Typer(help="Convert traces for other tools.", no_args_is_help=True)


@commands.command("export")
def trace_export(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    chrome: Annotated[
        Path, typer.Option("--chrome", help="Chrome trace JSON to write (open in Perfetto).")
    ],
) -> None:
    """Write a trace in Chrome's trace event format, for Perfetto or chrome://tracing."""
    from pxn.app.chrome import chrome_trace_json
    from pxn.files import write_text_atomically
    from pxn.trace_reading import read_one

    ensure_writable_outputs(files={"chrome": chrome})
    refuse_overwriting_an_input(chrome, [trace], "chrome")
    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    write_text_atomically(chrome, chrome_trace_json(the_trace))
    say(f"wrote {chrome}")
