"""What every result of the API offers: its report, its text, and its rows as a frame.

A result is a frozen dataclass. Its report is the one the CLI prints; a
notebook shows the report's table form as HTML (`_repr_html_`) and `str` gives it as
text. `to_frame` is a pandas DataFrame of the rows the CSV holds: the same
columns, in the same order. pandas is not a dependency of pxn: it is imported
when a frame is asked for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pxn.api.report import Report, report_html, table_text

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
