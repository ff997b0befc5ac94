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

    .venv/bin/python experiments/local_validation/summarise.py experiments/local_validation quality

With `quality`, the quality model calibrated from the same eight singles
(DIR/validation-quality/validation.csv, as `run.sh quality` writes it) beside
the acceptance rates (DIR/validation/validation.csv), by the same groups plus
all batched runs and all 61: the wall-clock's error and coverage; the
proposals accepted, measured and as the predictions expected (each run's
simulated accepted per proposal applied to the proposals it made, as `pxn
validate` counts it); and, the quality model's alone, the best validation
score: the runs inside their predicted 5-95%, the interval's mean width, the
mean absolute and signed error of the predicted mean (measured less
predicted), and, as a baseline, the mean absolute deviation of the group's
measured scores from their own mean (what predicting that mean for every run
would be off by).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from statistics import mean

from sittings import calibration_single, fourth_sitting, parts  # beside this script

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


def wall_clock_cells(runs: list[dict[str, str]]) -> str:
    """MAPE, mean error, coverage, the intervals' mean width (p95 - p5 over the simulated
    mean) and mean percentile of the runs' wall-clocks."""
    n = len(runs)
    inside = sum(r["inside_interval"] == "True" for r in runs)
    sim = mean(abs(float(r["sim_error"])) for r in runs)
    percentile = mean(float(r["percentile"]) for r in runs)
    bias = mean(float(r["sim_error"]) for r in runs)
    width = mean(
        (float(r["sim_wall_clock_p95_s"]) - float(r["sim_wall_clock_p5_s"]))
        / float(r["sim_wall_clock_mean_s"])
        for r in runs
    )
    coverage = f"{inside}/{n} ({inside / n:.0%})"
    return f"{n} | {sim:.1%} | {bias:+.1%} | {coverage} | {width:.0%} | {percentile:.2f}"


def row(name: str, version: str, runs: list[dict[str, str]]) -> str:
    analytic = mean(abs(float(r["analytic_error"])) for r in runs)
    return f"| {name} | {version} | {wall_clock_cells(runs)} | {analytic:.1%} |"


def acceptance_cells(runs: list[dict[str, str]]) -> str:
    """Proposals accepted, measured and as the predictions expected of the same proposals."""
    made = [int(r["measured_proposals"]) for r in runs]
    accepted = sum(int(r["measured_accepted"]) for r in runs)
    rates = [float(r["sim_accepted_mean"]) / float(r["sim_proposals_mean"]) for r in runs]
    expected = sum(n * a for n, a in zip(made, rates, strict=True))
    return f"{accepted}/{sum(made)} ({accepted / sum(made):.1%}) | {expected / sum(made):.1%}"


def score_cells(runs: list[dict[str, str]]) -> str:
    """The best validation score: coverage, interval width, errors, and the baseline."""
    n = len(runs)
    inside = sum(r["best_score_inside"] == "True" for r in runs)
    measured = [float(r["measured_best_score"]) for r in runs]
    errors = [m - float(r["sim_best_score_mean"]) for m, r in zip(measured, runs, strict=True)]
    width = mean(float(r["sim_best_score_p95"]) - float(r["sim_best_score_p5"]) for r in runs)
    spread = mean(abs(m - mean(measured)) for m in measured)
    return (
        f"{inside}/{n} ({inside / n:.0%}) | {width:.3f} | {mean(abs(e) for e in errors):.3f} "
        f"| {mean(errors):+.3f} | {spread:.3f}"
    )


def quality(study: Path) -> None:
    """The quality model beside the acceptance rates, calibrated from the same singles."""
    print(
        "| runs | scenario | n | wall-clock MAPE | mean error | inside 5-95% (coverage) "
        "| width | mean percentile | accepted, measured | expected | best score inside 5-95% "
        "| its width | best score mean abs. error | mean error | measured scores' own spread |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    versions = {"validation": "acceptance rates", "validation-quality": "quality model"}
    tables = {}
    for folder in versions:
        with (study / folder / "validation.csv").open(encoding="utf-8") as file:
            tables[folder] = [r for r in csv.DictReader(file) if r["status"] == "completed"]
    names = [r["run"] for r in tables["validation"]]
    by_group: dict[str, list[str]] = {}
    for run in names:
        by_group.setdefault(group_of(run, "validation"), []).append(run)
    groups = {name: by_group[name] for name in sorted(by_group, key=lambda g: "in-sample" not in g)}
    groups["**all held-out runs of the first three sittings**"] = [
        run for run in names if not calibration_single(run) and not fourth_sitting(run)
    ]
    groups["all batched runs"] = [run for run in names if parts(run)[0] != "1x1"]
    groups["**all runs**"] = names
    for name in groups:
        for folder, version in versions.items():
            runs = [r for r in tables[folder] if r["run"] in groups[name]]
            scores = score_cells(runs) if folder == "validation-quality" else "- | - | - | - | -"
            print(
                f"| {name} | {version} | {wall_clock_cells(runs)} | {acceptance_cells(runs)} "
                f"| {scores} |"
            )


def main(study: Path) -> None:
    print(
        "| runs | scenario | n | simulator MAPE | mean error | inside 5-95% (coverage) "
        "| width | mean percentile | closed-form MAPE |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
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
    if sys.argv[2:] == ["quality"]:
        quality(Path(sys.argv[1]))
    else:
        main(Path(sys.argv[1]))
