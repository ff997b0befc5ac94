"""Name the allocations the advise check runs for real: PxN:b, one per line.

The recommendation, and the two allocations whose predicted mean wall-clock is
nearest 1.4x and 2x the recommendation's: clearly slower by the prediction,
so that the measured ranking has something to confirm or refute.

    .venv/bin/python experiments/advise_check/pick.py experiments/advise_check/advice/advise.json
"""

import json
import sys
from pathlib import Path

SLOWER = (1.4, 2.0)


def main() -> None:
    advice = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    rows = advice["allocations"]
    best = next(r for r in rows if r["recommended"])
    picked = [best]
    for factor in SLOWER:
        target = factor * best["wall_clock_mean_s"]
        picked.append(min(rows, key=lambda r: abs(r["wall_clock_mean_s"] - target)))
    for r in picked:
        print(f"{r['p']}x{r['n']}:{r['b']}")


if __name__ == "__main__":
    main()
