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
batched run, 2x1-w2-s0), as `run.sh analyse` writes them. Groups: the runs the
scenario was calibrated from (in-sample), the batched runs at the singles' W = 2,
and the batched runs at a W the singles never ran (cross-W). Only completed runs
count.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from statistics import mean

RUN = re.compile(r"(?P<shape>\d+x\d+)-w(?P<workers>\d+)-s\d+")
VERSIONS = {
    "validation": "with parameter draws",
    "validation-point": "point estimate",
    "validation-nocache": "with draws, no prefix cache",
    "validation-nospread": "with draws, no run spread",
    "validation-batched-rate": "point, batched runs' acceptance (diagnostic)",
    "validation-one-batched": "singles and 2x1-w2-s0, with draws",
}
ONE_BATCHED = "2x1-w2-s0"  # calibrated from in validation-one-batched


def group_of(run: str, folder: str) -> str:
    found = RUN.search(run)
    if found is None:
        raise SystemExit(f"summarise.py: {run} is not named SHAPE-wW-sSEED")
    if found["shape"] == "1x1":
        return "singles (calibration set, in-sample)"
    if folder == "validation-one-batched" and found[0] == ONE_BATCHED:
        return f"{ONE_BATCHED} (calibration set, in-sample)"
    if found["workers"] == "2":
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
        held_out = [r for r in completed if "in-sample" not in group_of(r["run"], folder)]
        print(row("**all held-out runs**", version, held_out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
