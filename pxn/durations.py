"""Durations as people write them (3h, 90m) and read them (2.50 h, 4.2 min)."""

from __future__ import annotations

import re

from pxn.errors import PxnError

DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str) -> float:
    """'3h', '90m', '1h30m', '45min', '600s' or plain seconds; `what` names the flag."""
    clean = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", clean):
        return float(clean)
    parts = re.findall(r"(\d+(?:\.\d+)?)(min|sec|s|m|h|d)", clean)
    if not parts or "".join(n + u for n, u in parts) != clean:
        raise PxnError(f"{what} is a duration like 3h, 90m, 1h30m or 600s: got {text!r}")
    return sum(float(n) * DURATION_UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
