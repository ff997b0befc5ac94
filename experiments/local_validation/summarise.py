"""Error and coverage of the local validation study, by group of runs, with and without
the scenario's parameter uncertainty: a markdown table on stdout.

    .venv/bin/python experiments/local_validation/summarise.py experiments/local_validation

Reads DIR/validation/validation.csv (the scenario with its bootstrap draws) and
DIR/validation-point/validation.csv (the same point estimate without them) and
DIR/validation-nocache/validation.csv (with draws, the prefix cache left out) and
DIR/validation-nospread/validation.csv (with draws, each model's run_spread left out) and
DIR/validation-batched-rate/validation.csv (the point estimate with the held-out
batched runs' own acceptance rate: a diagnostic, not a prediction) and
DIR/validation-one-batched/validation.csv (calibrated from the singles and one
batched run, 2x1-w2-s0) and DIR/validation-day/validation.csv (calibrated from
the fourth sitting's own singles, its runs only), as `run.sh analyse` writes
them. Groups (sittings.py): the runs the scenario was calibrated from
(in-sample), the batched runs at the singles' W = 2 and those at a W the singles
never ran (cross-W) of the first three sittings, and all held-out runs of those;
then the fourth sitting's runs (measured after run_spread was added, on another
day's machine) on their own: its singles and its batched runs. Only completed
runs count.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from statistics import mean

from sittings import fourth_sitting, parts  # beside this script

VERSIONS = {
    "validation": "with parameter draws",
    "validation-point": "point estimate",
    "validation-nocache": "with draws, no prefix cache",
    "validation-nospread": "with draws, no run spread",
    "validation-batched-rate": "point, batched runs' acceptance (diagnostic)",
    "validation-one-batched": "singles and 2x1-w2-s0, with draws",
    "validation-day": "the fourth sitting's own singles, with draws",
}
ONE_BATCHED = "2x1-w2-s0"  # calibrated from in validation-one-batched


def group_of(run: str, folder: str) -> str:
    shape, workers, _ = parts(run)
    day = folder == "validation-day"  # calibrated from the fourth sitting's own singles
    if shape == "1x1":
        if fourth_sitting(run) == day:
            return "singles (calibration set, in-sample)"
        return "singles of the fourth sitting's day (held out)"
    if folder == "validation-one-batched" and parts(run) == parts(ONE_BATCHED):
        return f"{ONE_BATCHED} (calibration set, in-sample)"
    if fourth_sitting(run):
        return "fourth sitting: batched, W = 2 and cross-W (held out)"
    if workers == 2:
        return "batched at W = 2 (held out)"
    return "batched at W = 1 and 4 (held out, cross-W)"


def row(name: str, version: str, runs: list[dict[str, str]]) -> str:
    n = len(runs)
    inside = sum(r["inside_interval"] == "True" for r in runs)
    sim = mean(abs(float(r["sim_error"])) for r in runs)
    analytic = mean(abs(float(r["analytic_error"])) for r in runs)
    percentile = mean(float(r["percentile"]) for r in runs)
    bias = mean(float(r["sim_error"]) for r in runs)
    return (
        f"| {name} | {version} | {n} | {sim:.1%} | {bias:+.1%} | {inside}/{n} ({inside / n:.0%}) "
        f"| {percentile:.2f} | {analytic:.1%} |"
    )


def main(study: Path) -> None:
    print(
        "| runs | scenario | n | simulator MAPE | mean error | inside 5-95% (coverage) "
        "| mean percentile | closed-form MAPE |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for folder, version in VERSIONS.items():
        with (study / folder / "validation.csv").open(encoding="utf-8") as file:
            completed = [r for r in csv.DictReader(file) if r["status"] == "completed"]
        groups: dict[str, list[dict[str, str]]] = {}
        for r in completed:
            groups.setdefault(group_of(r["run"], folder), []).append(r)
        for name in sorted(groups, key=lambda g: "in-sample" not in g):
            print(row(name, version, groups[name]))
        earlier = [
            r
            for r in completed
            if "in-sample" not in group_of(r["run"], folder) and not fourth_sitting(r["run"])
        ]
        if earlier:
            print(row("**all held-out runs of the first three sittings**", version, earlier))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
