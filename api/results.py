"""What every result of the API offers: its report, its text, and its records as a frame.

A result is a frozen dataclass. Its report is the one the CLI prints; a
notebook shows the report's table form as HTML (`_repr_html_`) and `str` gives it as
text. `to_frame` turns the result's records (the predictions of a sweep, the
allocations of an advice, ...) into a pandas DataFrame, one row each, the
columns read off the records' dataclass fields: a nested dataclass's fields
follow its name (an Interval `wall_clock` gives wall_clock_mean,
wall_clock_low and wall_clock_high), a dict's items follow its name by key,
and a dataclass with a `label` (a shape, an allocation) gives that label
too. A field added to a record later is a column without any edit here.
pandas is not a dependency of pxn: it is imported when a frame is asked for.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from pxn.api.report import Report, report_html, table_text

PANDAS_MISSING = "to_frame needs pandas, which pxn does not install: pip install pandas"


class Result(ABC):
    """The reading side every result shares; a result says its `report` and `records`."""

    @abstractmethod
    def report(self) -> Report:
        """The result as the CLI prints it (table), writes it (CSV rows) and dumps it (JSON)."""

    @abstractmethod
    def records(self) -> Sequence[Any]:
        """The dataclasses `to_frame` makes its rows of."""

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row each (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise ImportError(PANDAS_MISSING) from None
        return pandas.DataFrame([columns(record) for record in self.records()])

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


def columns(value: Any, name: str = "", kind: Any = None) -> dict[str, Any]:
    """`value` as flat columns named after `name` (see the module's docstring).

    `kind` is the value's declared type: a field declared as a dataclass but
    None (a scenario without prices) still gives that dataclass's columns,
    empty, so every row of a frame has the same columns.
    """
    cls = type(value) if dataclasses.is_dataclass(value) else dataclass_in(kind)
    if cls is not None:
        found: dict[str, Any] = {}
        if isinstance(getattr(cls, "label", None), property):
            found[name or "label"] = None if value is None else value.label
        hints = declared_types(cls)
        for field in dataclasses.fields(cls):
            inner = None if value is None else getattr(value, field.name)
            found |= columns(inner, joined(name, field.name), hints.get(field.name))
        return found
    if isinstance(value, dict):
        found = {}
        for key, item in value.items():
            found |= columns(item, joined(name, str(key)))
        return found
    return {name: value}


def joined(prefix: str, name: str) -> str:
    return f"{prefix}_{name}" if prefix else name


def declared_types(cls: type) -> dict[str, Any]:
    """The dataclass's field types, resolved; none when a name is only known to a type checker."""
    try:
        return typing.get_type_hints(cls)
    except NameError:
        return {}


def dataclass_in(kind: Any) -> type | None:
    """The dataclass a declared type names: itself, or the one arm of `X | None`."""
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return kind
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        arms = [arm for arm in typing.get_args(kind) if arm is not type(None)]
        if len(arms) == 1:
            return dataclass_in(arms[0])
    return None
