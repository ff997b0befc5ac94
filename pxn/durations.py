"""Durations as people write them (3h, 90m, 450ms) and read them (2.50 h, 4.2 min).

A duration written as text always carries its unit: a bare 90 read in the
wrong one is off by a factor of 60.
"""

from __future__ import annotations

import re

from pxn.errors import PxnError

DURATION_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str) -> float:
    """'3h', '90m', '1h30m', '45min', '600s' or '450ms', longer than zero; `what` names the
    flag or field."""
    clean = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", clean):
        raise PxnError(f"{text.strip()} has no unit; give a unit: {clean}s, {clean}m or {clean}h",
                       subject=what)  # fmt: skip
    parts = re.findall(r"(\d+(?:\.\d+)?)(min|sec|ms|s|m|h|d)", clean)
    if not parts or "".join(n + u for n, u in parts) != clean:
        raise PxnError(f"is a duration like 3h, 90m, 1h30m or 600s: got {text!r}", subject=what)
    seconds = sum(float(n) * DURATION_UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise PxnError(f"must be longer than zero: got {text!r}", subject=what)
    return seconds


def format_duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def format_span(low: float, high: float) -> str:
    """Two durations as one span, the unit said once when they share it: "39.6-58.4 min"."""
    low_text, high_text = format_duration(low), format_duration(high)
    low_number, low_unit = low_text.split()
    if high_text.endswith(f" {low_unit}"):
        return f"{low_number}-{high_text}"
    return f"{low_text} - {high_text}"
