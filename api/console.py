"""Where pxn writes: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pxn.api.tables import MAX_WIDTH
from pxn.durations import format_duration

# A terminal's width, or COLUMNS when set; piped, the width tables are made to
# fit (rich's default of 80 would drop columns a file has room for).
piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
stdout = Console(width=MAX_WIDTH) if piped else Console()
stderr = Console(stderr=True)
LOG_EVERY = 10.0  # seconds between progress lines in a log (stderr not a terminal)
STOPPED_AFTER = "stopped after"  # how an interrupted work's note begins


def progress_bar(shown: bool = True) -> Progress:
    """Work done out of all, on a terminal's stderr, gone when the work is (not `shown`: none)."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr,
        transient=True,
        # A log file gets no bar (rich would leave a blank line).
        disable=not (shown and stderr.is_terminal),
    )


class WorkProgress:
    """How much of a piece of work is done, and how long the rest should take.

    On a terminal, a bar on stderr, gone when the work is; in a log, a line
    when the work starts and one every LOG_EVERY seconds with the time left
    (the rate so far, extrapolated). The total may grow as the work learns
    what it needs (a race adds replicates for its contenders). Not `shown`,
    it only counts: the work then says how far it got when it is stopped.
    """

    def __init__(self, description: str, unit: str, total: int, shown: bool = True):
        self.description, self.unit, self.total = description, unit, total
        self.estimate: str | None = None  # what the work should take, said when it starts
        self.shown = shown
        self.done = 0
        self.started = self.logged = 0.0
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> WorkProgress:
        self.started = self.logged = time.monotonic()
        if self.shown and stderr.is_terminal:
            self.bar = progress_bar()
            self.bar.__enter__()
            self.task = self.bar.add_task(self.description, total=self.total)
        elif self.shown:
            guess = f" ({self.estimate})" if self.estimate else ""
            say(f"{self.description}: {self.total:,} {self.unit}{guess}", stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def advance(self, n: int) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        self.done, self.total = done, total or self.total
        if self.bar is not None:
            assert self.task is not None
            self.bar.update(self.task, completed=done, total=self.total)
        elif self.shown and time.monotonic() - self.logged >= LOG_EVERY:
            self.logged = time.monotonic()
            say(f"{self.description}: {self.so_far()} ({self.done / self.total:.0%}), "
                f"{self.time_left()} left", stderr)  # fmt: skip

    def time_left(self) -> str:
        if not self.done:
            return "unknown time"
        rate = self.done / (time.monotonic() - self.started)
        return "~" + format_duration((self.total - self.done) / rate)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def so_far(self) -> str:
        return f"{self.done:,} of {self.total:,} {self.unit}"

    @contextmanager
    def told_when_stopped(self) -> Iterator[None]:
        """Within: Ctrl-C (KeyboardInterrupt, or SIGTERM as the CLI raises it) cutting the
        work short carries a note of how far it got, "stopped after 40 of 360 replicates"."""
        try:
            yield
        except KeyboardInterrupt as stop:
            if not self.finished:
                stop.add_note(f"{STOPPED_AFTER} {self.so_far()}")
            raise


def say(text: str, console: Console = stdout) -> None:
    """One line of plain text: no markup, no highlighting, no wrapping (the terminal's own)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def print_set_aside(rejected: list[str], skipped: list[str]) -> None:
    """Traces set aside and trace lines skipped, one line each on stderr."""
    for reason in rejected:
        say(f"set aside: {reason}", stderr)
    if skipped:
        say(f"skipped {len(skipped)} unusable trace line(s); first: {skipped[0]}", stderr)
