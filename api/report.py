"""A result in every form: lines and tables for a person, rows for CSV, a document for
JSON; and `Result`, what every result of the API offers from its report (its text, HTML
and the CSV's rows as a frame).

JSON is strict: an undefined figure (NaN, infinity) is null. The table form is
printed on a rich Console (`show`): the CLI's terminal, or a string for a
notebook's display.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import textwrap
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from pxn.api.console import say
from pxn.api.tables import MAX_WIDTH, Grid, fit


@dataclass(frozen=True)
class Note:
    """A sentence of prose for a person: wrapped to the terminal, unlike a data line."""

    text: str
    label: str = "note"  # what the sentence is, printed before it


@dataclass
class Report:
    """A result in every form: `name` is the stem of its files (sweep -> sweep.csv)."""

    name: str
    shown: list[str | Note | Grid]  # for a person, in order: lines, notes and tables
    rows: list[dict[str, Any]]  # the CSV, one record per row
    document: dict[str, Any]  # the JSON


def interval_columns(name: str, interval: Any, unit: str = "") -> dict[str, Any]:
    """An interval's CSV columns: NAME_mean, NAME_p5 and NAME_p95 (each with `unit`), all
    None for no interval."""
    ends = ("mean", "low", "high")
    values = [None] * 3 if interval is None else [getattr(interval, end) for end in ends]
    return dict(zip((f"{name}_{c}{unit}" for c in ("mean", "p5", "p95")), values, strict=True))


def flattened(document: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A document's nested tables as one flat row: {"loads": {"task": x}} -> loads_task."""
    row: dict[str, Any] = {}
    for key, value in document.items():
        name = f"{prefix}_{key}" if prefix else key
        row |= flattened(value, name) if isinstance(value, dict) else {name: value}
    return row


def csv_text(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV with a header (the first row's keys); nothing for no rows."""
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def finite(value: Any) -> Any:
    """The value with every NaN or infinity in it (however deep) made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def json_text(document: dict[str, Any]) -> str:
    return json.dumps(finite(document), indent=2, allow_nan=False)


def show(report: Report, console: Console, wide: bool = False) -> None:
    """The report's table form on `console`: its lines, notes and tables, in order."""
    for block in report.shown:
        if isinstance(block, Grid):  # --wide may be wider than the console: not cropped
            console.print(fit(block, console, wide), crop=not wide)
        elif isinstance(block, Note):
            say(
                textwrap.fill(
                    f"{block.label}: {block.text}", console.width, subsequent_indent="    "
                ),
                console,
            )
        else:
            say(block, console)


def table_text(report: Report) -> str:
    """The report's table form as plain text, as the CLI prints it on a 100-column pipe."""
    # Not rich's Jupyter mode, which would display the text in a notebook, not return it.
    console = Console(
        file=io.StringIO(),
        width=MAX_WIDTH,
        color_system=None,
        force_terminal=False,
        force_jupyter=False,
    )
    show(report, console)
    return console.file.getvalue()


def report_html(report: Report) -> str:
    """The report's table form for a notebook: its lines, notes and tables, in order."""
    parts = []
    for block in report.shown:
        if isinstance(block, Grid):
            parts.append(block.html())
        elif isinstance(block, Note):
            parts.append(f"<p><b>{html.escape(block.label)}:</b> {html.escape(block.text)}</p>")
        else:
            parts.append(f'<p style="white-space:pre-wrap">{html.escape(block)}</p>')
    return "\n".join(parts)


PANDAS_MISSING = "to_frame needs pandas, which pxn does not install: pip install pandas"


class Result(ABC):
    """The reading side every result shares; a result says its `report`."""

    @abstractmethod
    def report(self) -> Report:
        """The result as the CLI prints it (table), writes it (CSV rows) and dumps it (JSON)."""

    def rows(self) -> list[dict[str, Any]]:
        """The frame's rows: the CSV's."""
        return self.report().rows

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise ImportError(PANDAS_MISSING) from None
        return pandas.DataFrame(self.rows())

    def __str__(self) -> str:
        return table_text(self.report())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # IPython takes a class's own __repr__ (a dataclass's, its fields) over a
        # _repr_pretty_ it inherits: each result class holds its own.
        super().__init_subclass__(**kwargs)
        cls._repr_pretty_ = Result._repr_pretty_

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """What IPython's terminal shows: the table as text, not the dataclass's fields."""
        printer.text(str(self))

    def _repr_html_(self) -> str:
        """What a notebook shows: the CLI's table form, its tables as HTML tables."""
        return report_html(self.report())
