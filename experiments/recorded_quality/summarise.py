"""summary.md from the study's validations and calibration: each shape's best validation
score and wall-clock against their predictions, and the inferred [quality] beside the truth.

    .venv/bin/python experiments/recorded_quality/summarise.py

Per held-out shape, the batched shapes together and all held-out runs:
- the best validation score (gepa's chosen candidate's): the runs' mean and sd; under the
  scenario calibrated from the singles and under the same scenario with the true
  [quality]: the predicted mean's absolute and signed error (predicted - measured), the
  runs inside the predicted 5-95% and the intervals' median width (p95 - p5, score
  units); beside them the error of the plainest forecast, the calibration singles' mean
  best score;
- the wall-clock under the calibrated scenario: MAPE, runs inside, the intervals' median
  width (p95 - p5 over the simulated mean) and the runs' mean percentile (0.5 when the
  predictions lean neither way).
Then each [quality] parameter: the truth the task was drawn from, the posterior's median
and 5-95% and its verdict, as `pxn calibrate` printed them (calibrate.txt).

`--same-examples`: the second arm's summary, from and into same-examples/.
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

from quality_run import Arm, arm
from study import CALIBRATION, name

from pxn.run_summary import summarize
from pxn.trace_reading import read_one

HERE = Path(__file__).resolve().parent
SHAPES = ("single", "2x2", "4x1", "1x4", "4x4")
BATCHED = SHAPES[1:]
POSTERIOR = re.compile(
    r"^\s+quality\.(\w+)\s+(\S+) \[(\S+), (\S+)\]\s+(\S+)\s+(pinned|narrowed|left to the prior)$"
)
Row = dict[str, str]


def completed(folder: Path, validation: str) -> list[Row]:
    with (folder / validation / "validation.csv").open() as f:
        return [r for r in csv.DictReader(f) if r["status"] == "completed"]


def groups(runs: list[Row]) -> dict[str, list[Row]]:
    """Each shape's runs, the batched shapes' together, and all."""
    by_shape = {shape: [r for r in runs if r["shape"] == shape] for shape in SHAPES}
    return by_shape | {
        "batched": [r for r in runs if r["shape"] in BATCHED],
        "all held out": runs,
    }


def num(r: Row, key: str) -> float:
    return float(r[key])


def score_cells(runs: list[Row]) -> str:
    errors = [num(r, "sim_best_score_mean") - num(r, "measured_best_score") for r in runs]
    width = statistics.median(
        num(r, "sim_best_score_p95") - num(r, "sim_best_score_p5") for r in runs
    )
    return (
        f"{statistics.mean(num(r, 'sim_best_score_mean') for r in runs):.3f} "
        f"| {statistics.mean(map(abs, errors)):.3f} | {statistics.mean(errors):+.3f} "
        f"| {sum(r['best_score_inside'] == 'True' for r in runs)}/{len(runs)} | {width:.2f}"
    )


def time_cells(runs: list[Row]) -> str:
    width = statistics.median(
        (num(r, "sim_wall_clock_p95_s") - num(r, "sim_wall_clock_p5_s"))
        / num(r, "sim_wall_clock_mean_s")
        for r in runs
    )
    return (
        f"{100 * statistics.mean(abs(num(r, 'sim_error')) for r in runs):.1f}% "
        f"| {sum(r['inside_interval'] == 'True' for r in runs)}/{len(runs)} | {100 * width:.0f}% "
        f"| {statistics.mean(num(r, 'percentile') for r in runs):.2f}"
    )


def singles_mean_best(folder: Path) -> float:
    """The calibration singles' mean best validation score: the plainest forecast."""
    traces = [folder / "runs" / name(shape, seed) / "trace.jsonl" for shape, seed in CALIBRATION]
    return statistics.mean(summarize(read_one(t)).best_score for t in traces)


def parameter_rows(study: Arm) -> list[str]:
    rows = []
    for line in (HERE / study.folder / "calibrate.txt").read_text().splitlines():
        found = POSTERIOR.match(line)
        if found is None:
            continue
        parameter, median, low, high, ratio, verdict = found.groups()
        true = getattr(study.truth.quality, parameter)
        inside = "yes" if float(low) <= true <= float(high) else "no"
        posterior = f"{median} [{low}, {high}]"
        rows.append(f"| {parameter} | {true:g} | {posterior} | {inside} | {ratio} | {verdict} |")
    return rows


def main(study: Arm) -> None:
    folder = HERE / study.folder
    oracle = groups(completed(folder, "validation-true-quality"))
    calibrated = groups(completed(folder, "validation"))
    plain = singles_mean_best(folder)
    score_rows, time_rows = [], []
    for label, runs in calibrated.items():
        scores = [num(r, "measured_best_score") for r in runs]
        measured = f"{statistics.mean(scores):.3f} | {statistics.stdev(scores):.3f}"
        naive = statistics.mean(abs(plain - score) for score in scores)
        score_rows.append(
            f"| {label} | {len(runs)} | {measured} | {score_cells(runs)} "
            f"| {score_cells(oracle[label])} | {naive:.3f} |"
        )
        time_rows.append(f"| {label} | {len(runs)} | {time_cells(runs)} |")
    text = [
        f"# Held-out runs predicted from {len(CALIBRATION)} singles",
        "",
        "## The best validation score",
        "",
        "| shape | runs | measured | sd | calibrated: predicted | abs. error | signed error "
        "| inside 5-95% | width | true [quality]: predicted | abs. error | signed error "
        "| inside 5-95% | width | singles' mean: abs. error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *score_rows,
        "",
        "measured and predicted: means over the runs; sd: the measured scores' standard "
        "deviation; signed error: predicted - measured; width: p95 - p5 of the predicted best "
        "score, median over the runs; true [quality]: the calibrated scenario with the "
        "[quality] the task was drawn from "
        f"(calibrated-true-quality.toml); singles' mean: each run forecast as {plain:.3f}, "
        "the calibration singles' mean best score.",
        "",
        "## The wall-clock (calibrated scenario)",
        "",
        "| shape | runs | MAPE | inside 5-95% | width | mean pct. |",
        "|---|---|---|---|---|---|",
        *time_rows,
        "",
        "width: p95 - p5 of the simulated wall-clock over its mean, median over the runs; mean "
        "pct.: the mean share of simulated runs faster than the measured one.",
        "",
        f"## [quality] inferred from the {len(CALIBRATION)} singles, beside the truth",
        "",
        "| parameter | truth | posterior median [5%, 95%] | truth inside | IQR ratio | verdict |",
        "|---|---|---|---|---|---|",
        *parameter_rows(study),
        "",
        "IQR ratio: the posterior's interquartile range over the prior's (pxn calibrate: "
        "pinned <= 0.5, narrowed <= 0.8, else left to the prior).",
        "",
    ]
    (folder / "summary.md").write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main(arm(sys.argv[1:] == ["--same-examples"]))
