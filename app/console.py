"""Where the CLI writes: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

# Tables are wide: when piped, do not squeeze them to 80 columns.
stdout = Console() if sys.stdout.isatty() else Console(width=160)
stderr = Console(stderr=True)


def progress_bar() -> Progress:
    """Work done out of all, on stderr, gone when the work is."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def print_set_aside(rejected: list[str], skipped: list[str]) -> None:
    """Traces set aside and trace lines skipped, one line each on stderr."""
    for reason in rejected:
        stderr.print(f"set aside: {reason}", markup=False, highlight=False)
    if skipped:
        stderr.print(
            f"skipped {len(skipped)} unusable trace line(s); first: {skipped[0]}",
            markup=False,
            highlight=False,
        )
