"""Reading the tables of a TOML file: each mistake one line naming the field."""

from __future__ import annotations

import difflib
from typing import Any

from pxn.errors import PxnError


def table(data: Any, what: str, known: set[str] | None = None) -> dict[str, Any]:
    """The table, refused when it is not one or has a key not in `known` (when given)."""
    if not isinstance(data, dict):
        raise PxnError("must be a table", subject=what)
    if known is not None:
        known_keys(data, known, what)
    return data


def known_keys(data: dict[str, Any], known: set[str], what: str) -> None:
    """Refuse a key the table does not have, with the closest one it does."""
    unknown = sorted(set(data) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PxnError(f"has an unknown field {unknown[0]!r}{hint}", subject=what)


def required_table(data: Any, known: set[str], required: list[str], what: str) -> dict:
    """The table, refused when it is not one, has a key it does not know, or lacks one of
    `required`."""
    fields = table(data, what, known)
    missing = [name for name in required if name not in fields]
    if missing:
        raise PxnError(f"is missing field(s) {', '.join(missing)}", subject=what)
    return fields


def is_number(value: Any) -> bool:
    """A TOML number (a bool is not one, though Python says it is an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def whole(value: Any, what: str, least: int = 1) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
        raise PxnError(f"must be a whole number >= {least}: got {value!r}", subject=what)
    return value


def at_least(value: Any, what: str, least: float = 0.0, unit: str = "") -> float:
    if not (is_number(value) and value >= least):
        raise PxnError(f"must be a number >= {least:g}{unit}: got {value!r}", subject=what)
    return float(value)


def share(value: Any, what: str, top_open: bool = False) -> float:
    """A probability in [0, 1] (or [0, 1) when `top_open`)."""
    top = value < 1 if top_open and is_number(value) else True
    if not (is_number(value) and 0 <= value <= 1 and top):
        bounds = "[0, 1)" if top_open else "[0, 1]"
        raise PxnError(f"must be a probability in {bounds}: got {value!r}", subject=what)
    return float(value)
