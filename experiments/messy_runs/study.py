"""The messy-run study's analysis: calibrate from the tuning singles, validate the rest.

    .venv/bin/python experiments/messy_runs/run.py analyse [tuning|held-out]

`tuning` calibrates a scenario from the three tuning singles (calibrated.toml, the report
in calibrate.txt) and validates every tuning run against it (validation-tuning/);
`held-out` validates the held-out runs (validation-held-out/), which were read only after
the code was frozen. `check-tuning` and `check-held-out` do the same for the second
program from its two tuning singles (check-calibrated.toml, check-calibrate.txt). Each
writes summary-NAME.md: per group of runs, the wall-clock's and
the best validation score's error, coverage (runs inside the predicted 5-95%) and the
intervals' median width, the iterations' error and the lost proposals' share, measured
against predicted.
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PXN = Path(sys.executable).parent / "pxn"
# Each program's calibration singles.
CALIBRATION = {"": ("single-1", "single-2", "single-3"), "check-": ("check-single-1",
               "check-single-2")}  # fmt: skip
Row = dict[str, str]


def pxn(output: str, *args: str) -> str:
    """A pxn command run from the repository root, its output kept beside the study."""
    done = subprocess.run([str(PXN), *args], cwd=ROOT, capture_output=True, text=True)
    text = done.stdout + done.stderr
    (HERE / output).write_text(text)
    if done.returncode:
        raise SystemExit(f"pxn {args[0]} failed ({done.returncode}):\n{text}")
    return text


def runs_of(names: list[str]) -> list[str]:
    return [str((HERE / "runs" / name).relative_to(ROOT)) for name in names]


def analyse(which: str, plan: dict[str, tuple[str, int]]) -> None:
    program = "check-" if which.startswith("check-") else ""
    singles = CALIBRATION[program]
    scenario = str((HERE / f"{program}calibrated.toml").relative_to(ROOT))
    if which.endswith("tuning"):
        pxn(f"{program}calibrate.txt", "calibrate", *runs_of(list(singles)), "-o", scenario)
    folder = f"validation-{which}"
    pxn(f"{folder}.txt", "validate", "--scenario", scenario, *runs_of(list(plan)),
        "--reps", "400", "--out", str((HERE / folder).relative_to(ROOT)))  # fmt: skip
    summarise(which)


def summarise(which: str) -> None:
    """summary-WHICH.md from validation-WHICH/validation.csv."""
    singles = CALIBRATION["check-" if which.startswith("check-") else ""]
    folder = f"validation-{which}"
    with (HERE / folder / "validation.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "completed"]
    groups = {
        "calibration singles": [r for r in rows if name(r) in singles],
        "other singles": [r for r in rows if r["shape"] == "single" and name(r) not in singles],
        "batched": [r for r in rows if r["shape"] != "single"],
        "all": rows,
    }
    lines = [
        f"# {which} runs against the scenario from {', '.join(singles)}",
        "",
        "| runs | n | wall-clock MAPE | inside | width | best score MAE | inside | width "
        "| iterations error | lost share: measured / predicted | no-proposal share: "
        "measured / predicted |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, group in groups.items():
        if group:
            lines.append(f"| {label} | {len(group)} | {cells(group)} |")
    lines += ["", "| run | shape | wall-clock | predicted [5-95%] | best | predicted [5-95%] "
              "| iterations m/sim |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        predicted_score = "-"
        if r["best_score_inside"] in ("True", "False"):
            predicted_score = (
                f"{num(r, 'sim_best_score_mean'):.3f} [{num(r, 'sim_best_score_p5'):.3f}, "
                f"{num(r, 'sim_best_score_p95'):.3f}]"
            )
        lines.append(
            f"| {name(r)} | {r['shape']} | {num(r, 'measured_wall_clock_s'):.0f} s "
            f"| {num(r, 'sim_wall_clock_mean_s'):.0f} [{num(r, 'sim_wall_clock_p5_s'):.0f}, "
            f"{num(r, 'sim_wall_clock_p95_s'):.0f}] | {num(r, 'measured_best_score'):.3f} "
            f"| {predicted_score} "
            f"| {r['measured_iterations']}/{num(r, 'sim_iterations_mean'):.1f} |"
        )
    (HERE / f"summary-{which}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def name(r: Row) -> str:
    return Path(r["run"]).parent.name


def num(r: Row, key: str) -> float:
    return float(r[key]) if r[key] not in ("", "None") else float("nan")


def cells(group: list[Row]) -> str:
    """The group's figures, as the table's cells."""
    mape = statistics.mean(abs(num(r, "sim_error")) for r in group)
    inside = sum(r["inside_interval"] == "True" for r in group)
    width = statistics.median(
        (num(r, "sim_wall_clock_p95_s") - num(r, "sim_wall_clock_p5_s"))
        / num(r, "sim_wall_clock_mean_s")
        for r in group
    )
    scored = [r for r in group if r["best_score_inside"] in ("True", "False")]
    score = "- | - | -"  # a scenario of acceptance rates predicts no score
    if scored:
        error = statistics.mean(
            abs(num(r, "sim_best_score_mean") - num(r, "measured_best_score")) for r in scored
        )
        score_inside = sum(r["best_score_inside"] == "True" for r in scored)
        score_width = statistics.median(
            num(r, "sim_best_score_p95") - num(r, "sim_best_score_p5") for r in scored
        )
        score = f"{error:.3f} | {score_inside}/{len(scored)} | {score_width:.2f}"
    iterations = statistics.mean(abs(num(r, "sim_iterations_error")) for r in group)

    def pair(measured: str, predicted: str) -> str:
        m = statistics.mean(num(r, measured) for r in group)
        p = statistics.mean(num(r, predicted) for r in group)
        return f"{m:.0%} / {p:.0%}"

    return (
        f"{mape:.1%} | {inside}/{len(group)} | {width:.0%} | {score} | {iterations:.1%} "
        f"| {pair('measured_failed_share', 'sim_failed_share_mean')} "
        f"| {pair('measured_no_proposal_share', 'sim_no_proposal_share_mean')}"
    )
