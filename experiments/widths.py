"""Coverage beside the intervals' width, from the per-run tables pxn writes.

    .venv/bin/python experiments/widths.py CSV [CSV ...]

Each CSV is a `pxn validate` validation.csv or a `pxn conformance` conformance.csv.
Over their completed runs together it prints the wall-clock's coverage (runs inside the
simulated 5-95%) and the interval's median width over the simulated mean, and the same of
the best validation score (width in score units) where the table has it.
"""

from __future__ import annotations

import csv
import sys
from statistics import median


def completed(paths: list[str]) -> list[dict[str, str]]:
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as file:
            runs += [r for r in csv.DictReader(file) if r["status"] == "completed"]
    return runs


def main(paths: list[str]) -> None:
    runs = completed(paths)
    inside = sum(r["inside_interval"] == "True" for r in runs)
    width = median(
        (float(r["sim_wall_clock_p95_s"]) - float(r["sim_wall_clock_p5_s"]))
        / float(r["sim_wall_clock_mean_s"])
        for r in runs
    )
    print(f"wall-clock: {inside}/{len(runs)} inside, median width {width:.0%} of the mean")
    scored = [r for r in runs if r.get("sim_best_score_p5")]
    if scored:
        inside = sum(r["best_score_inside"] == "True" for r in scored)
        width = median(
            float(r["sim_best_score_p95"]) - float(r["sim_best_score_p5"]) for r in scored
        )
        print(f"best score: {inside}/{len(scored)} inside, median width {width:.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: widths.py CSV [CSV ...]")
    main(sys.argv[1:])
