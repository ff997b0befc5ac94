"""A command's result shown (--format) and written (--out), its paths checked before
any work starts.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pxn.api.console import say, stderr, stdout
from pxn.api.report import Report, csv_text, json_text, show
from pxn.errors import PxnError
from pxn.files import write_text_atomically
from pxn.trace_reading import TRACE_NAME

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("table", "csv", "json")


def refuse_overwriting_an_input(output: Path, inputs: list[Path], subject: str = "output") -> None:
    """What a command writes must not replace a trace (or summaries file) it reads."""
    for given in inputs:
        if output.resolve() in (given.resolve(), (given / TRACE_NAME).resolve()):
            raise PxnError(f"{output} is one of the inputs; write elsewhere", subject=subject)


def check_writable(path: Path | None, subject: str, directory: bool = False) -> None:
    """Refuse, before the work it would hold, a file (or directory) path that cannot be
    written (None: not asked for): its directory, or the nearest existing one above, is
    tried with a new file (permission bits say nothing for root or a read-only file system).
    `subject` names it in the error ("trace", "out")."""
    if path is None:
        return
    try:
        if directory and path.exists() and not path.is_dir():
            raise PxnError(f"{path} is a file, not a directory", subject=subject)
        if not directory and path.is_dir():
            raise PxnError(f"{path} is a directory, not a file", subject=subject)
        parent = path if directory else path.parent
        existing = next(p for p in (parent, *parent.parents) if p.exists())
        if not existing.is_dir():
            raise PxnError(f"{path} cannot be created: {existing} is a file", subject=subject)
        # Files are written beside their final place, then renamed (pxn.files): try one.
        try:
            fd, probe = tempfile.mkstemp(dir=existing, prefix=".pxn-probe-")
        except OSError as exc:
            raise PxnError(
                f"{path} cannot be written: {existing} takes no new file ({reason_of(exc)})",
                subject=subject,
            ) from None
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:  # a name too long, a missing device: the user's error about it
        raise PxnError(f"{path} cannot be written: {reason_of(exc)}", subject=subject) from None


def reason_of(error: OSError) -> str:
    return (error.strerror or type(error).__name__).lower()


@dataclass(frozen=True)
class Output:
    """What a command was asked to print (`format`) and write (`out`), checked when made."""

    format: str = "table"
    out: Path | None = None
    wide: bool = False  # every column of every table, however wide

    @classmethod
    def taken_from(cls, flags: dict[str, Any]) -> Output:
        """The output a command's `flags` ask for, taken out of them: the flags left are its
        API function's keywords."""
        return cls(flags.pop("output_format"), flags.pop("out", None), flags.pop("wide", False))

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise PxnError(f"is table, csv or json: got {self.format!r}", subject="format")
        if self.out is not None:
            check_writable(self.out, "out", directory=True)

    def show(self, report: Report) -> None:
        """The report on stdout in the asked format."""
        if self.format == "csv":
            sys.stdout.write(csv_text(report.rows))
        elif self.format == "json":
            sys.stdout.write(json_text(report.document) + "\n")
        else:
            show(report, stdout, self.wide)

    def write(self, report: Report, figures: dict[str, Callable[[], Figure]]) -> None:
        """Into --out (when given): the figures (`name`: a function drawing it), the CSV, the
        JSON.

        Ctrl-C and SIGTERM wait until all are written: the set is whole, never part of it.
        """
        from pxn.sim.backends import STOPPING, signals_held

        if self.out is None:
            return
        if figures:  # matplotlib: only when a figure is written
            from pxn.api.plots import save_figure
        with signals_held(STOPPING):
            written = [save_figure(draw(), self.out / name) for name, draw in figures.items()]
            if report.rows:
                written.append(
                    write_text_atomically(self.out / f"{report.name}.csv", csv_text(report.rows))
                )
            written.append(
                write_text_atomically(self.out / f"{report.name}.json", json_text(report.document))
            )
            say("wrote " + ", ".join(map(str, written)), stderr)
