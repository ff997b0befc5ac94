"""Which runs of the local study are which, from their names (SHAPE-wW-sSEED).

The first three sittings (2026-12-03 and 04) measured the eight calibration
singles (seeds 0 to 3 at W = 1 and 2), the batched runs at W = 2 (seeds 0 to 4)
and the cross-W runs (seeds 0 and 1). The fourth (2026-12-05), decided after
run_spread was added, measured batched runs at W = 2 with seeds 5 and 6, cross-W
runs with seed 2 and, on a faster machine than the day before, singles of its
own day (seeds 4 to 6).
"""

from __future__ import annotations

import re

RUN = re.compile(r"(?P<shape>\d+x\d+)-w(?P<workers>\d+)-s(?P<seed>\d+)")


def parts(name: str) -> tuple[str, int, int]:
    """(shape, W, seed) of a run's name or path."""
    found = RUN.search(name)
    if found is None:
        raise SystemExit(f"{name} is not named SHAPE-wW-sSEED")
    return found["shape"], int(found["workers"]), int(found["seed"])


def fourth_sitting(name: str) -> bool:
    shape, workers, seed = parts(name)
    if shape == "1x1":
        return seed >= 4
    return seed >= 5 if workers == 2 else seed >= 2


def calibration_single(name: str) -> bool:
    """One of the eight singles the main analysis calibrates from."""
    return parts(name)[0] == "1x1" and not fourth_sitting(name)


def earlier_batched(name: str) -> bool:
    """A batched run of the first three sittings."""
    return parts(name)[0] != "1x1" and not fourth_sitting(name)
