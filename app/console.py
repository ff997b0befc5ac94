"""Where the CLI writes: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from pxn.app.tables import MAX_WIDTH

# A terminal's width, or COLUMNS when set; piped, the width tables are made to
# fit (rich's default of 80 would drop columns a file has room for).
piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
stdout = Console(width=MAX_WIDTH) if piped else Console()
stderr = Console(stderr=True)


def progress_bar() -> Progress:
    """Work done out of all, on a terminal's stderr, gone when the work is."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,  # a log file gets no bar (rich would leave a blank line)
    )


def say(text: str, console: Console = stdout) -> None:
    """One line of plain text: no markup, no highlighting, no wrapping (the terminal's own)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def print_set_aside(rejected: list[str], skipped: list[str]) -> None:
    """Traces set aside and trace lines skipped, one line each on stderr."""
    for reason in rejected:
        say(f"set aside: {reason}", stderr)
    if skipped:
        say(f"skipped {len(skipped)} unusable trace line(s); first: {skipped[0]}", stderr)
