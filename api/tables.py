"""Tables that fit the terminal and never cut a number.

A report describes its table as a `Grid` (printed as it is, all of it): the
columns in reading order, each with a rank (0: always shown; the highest rank
goes first when the table is too wide), and rows of text. `fit` shows the
columns that fit the width (at most 100 columns, fewer on a narrower terminal)
and says in the caption which ones `--wide` would add. A cell is never wrapped
or cut: when even the rank-0 columns do not fit, each row becomes one line of
"column value" pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape as escape_html

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

MAX_WIDTH = 100  # a table fits this many columns unless --wide asks for all


@dataclass(frozen=True)
class Column:
    name: str  # may hold a line break: a header of two short lines keeps the column narrow
    left: bool = False  # text reads from the left; numbers line up on the right
    rank: int = 0  # 0: always shown; higher: dropped sooner when the table is too wide
    words: str = ""  # the column's name where the header abbreviates it (caption, row lines)

    @property
    def long_name(self) -> str:
        return self.words or self.name.replace("\n", " ")


@dataclass
class Grid:
    title: str
    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""

    def __rich__(self) -> Table:
        """Printed as it is, a grid is its whole table (`fit` chooses for a terminal)."""
        return self.table(list(range(len(self.columns))), self.caption)

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells))

    def html(self) -> str:
        """The whole grid as an HTML table: a notebook scrolls, so no column is dropped."""
        head = "".join(
            f'<th style="text-align:{"left" if c.left else "right"}">'
            f"{escape_html(c.name).replace(chr(10), '<br>')}</th>"
            for c in self.columns
        )
        body = "".join(
            "<tr>"
            + "".join(
                f'<td style="text-align:{"left" if c.left else "right"}">{escape_html(cell)}</td>'
                for c, cell in zip(self.columns, row, strict=True)
            )
            + "</tr>"
            for row in self.rows
        )
        caption = f"<caption>{escape_html(self.title)}</caption>" if self.title else ""
        notes = f"<p>{escape_html(self.caption)}</p>" if self.caption else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}"

    def table(self, shown: list[int], caption: str) -> Table:
        # Escaped: a "[prices]" in a title or a cell is text, not markup.
        table = Table(
            title=escape(self.title),
            caption=escape(caption) if caption else None,
            caption_justify="left",  # notes run to several lines: centred, they read badly
        )
        for i in shown:
            column = self.columns[i]
            justify = "left" if column.left else "right"
            table.add_column(escape(column.name), justify=justify, no_wrap=True)
        for row in self.rows:
            table.add_row(*(escape(row[i]) for i in shown))
        return table


def natural_width(console: Console, table: Table) -> int:
    """The table's width with every cell on one line."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def fit(grid: Grid, console: Console, wide: bool = False) -> RenderableType:
    """The grid as a table `console` can print whole: see the module's docstring."""
    shown = list(range(len(grid.columns)))
    if wide:
        table = grid.table(shown, grid.caption)
        table.width = natural_width(console, table)  # wider than the terminal if need be
        return table
    width = min(MAX_WIDTH, console.width)
    # Drop the highest rank first; within a rank, the rightmost column first.
    droppable = sorted(
        (i for i, c in enumerate(grid.columns) if c.rank > 0),
        key=lambda i: (grid.columns[i].rank, i),
    )
    while True:
        dropped = [c.long_name for i, c in enumerate(grid.columns) if i not in shown]
        caption = grid.caption
        if dropped:
            caption += ("\n" if caption else "") + f"--wide adds: {', '.join(dropped)}"
        table = grid.table(shown, caption)
        if natural_width(console, table) <= width:
            return table
        if not droppable:
            return rows_as_lines(grid, shown, caption)
        shown.remove(droppable.pop())


def rows_as_lines(grid: Grid, shown: list[int], caption: str) -> RenderableType:
    """A table too wide for the terminal as one line per row, wrapped at spaces."""
    first, *rest = shown
    lines = [Text(grid.title, style="italic")]
    for row in grid.rows:
        pairs = [f"{grid.columns[i].long_name} {row[i]}" for i in rest if row[i]]
        lines.append(Text(f"{row[first]}: " + ", ".join(pairs)))
    if caption:
        lines.append(Text(caption, style="dim"))
    return Group(*lines)
