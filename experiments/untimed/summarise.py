"""summary.md from the study's validations: each reading's error, coverage and interval widths.

    .venv/bin/python experiments/untimed/summarise.py

Per reading (timed, untimed, untimed-v1) and W: the held-out runs, the
simulator's MAPE against their measured wall-clock, how many fell inside the
printed 5-95% interval, the intervals' median width (p95 - p5 over the
simulated mean), the runs' mean percentile in their predictions, and the
calibrated rollout latency's mean beside the truth's.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from pxn.scenario import Scenario

HERE = Path(__file__).resolve().parent
READINGS = {
    "timed": "timed (each rollout in rec.rollout)",
    "untimed": "untimed, the one line (spans as makespans)",
    "untimed-v1": "untimed, read as before (spans as latencies)",
}
WORKERS = (4, 16)
TRUE_MEAN_MS = 20 * math.exp(0.5**2 / 2)  # synthetic_run.ROLLOUT's mean, as drawn


def rows(label: str) -> list[dict[str, str]]:
    with (HERE / "validation" / label / "validation.csv").open() as f:
        return [r for r in csv.DictReader(f) if r["status"] == "completed"]


def figures(runs: list[dict[str, str]]) -> tuple[str, str, str, str]:
    errors = [abs(float(r["sim_error"])) for r in runs]
    inside = sum(r["inside_interval"] == "True" for r in runs)
    widths = [
        (float(r["sim_wall_clock_p95_s"]) - float(r["sim_wall_clock_p5_s"]))
        / float(r["sim_wall_clock_mean_s"])
        for r in runs
    ]
    return (
        f"{100 * statistics.mean(errors):.1f}%",
        f"{inside}/{len(runs)}",
        f"{100 * statistics.median(widths):.0f}%",
        f"{statistics.mean(float(r['percentile']) for r in runs):.2f}",
    )


def rollout_mean_ms(label: str) -> float:
    return 1000 * Scenario.load(HERE / "calibrated" / f"{label}.toml").rollout.mean()


def main() -> None:
    lines = [
        "| reading | W | held-out runs | MAPE | inside 5-95% | median width | mean pct. "
        "| rollout mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pooled = []
    for reading, words in READINGS.items():
        every = []
        for w in WORKERS:
            label = f"{reading}-w{w}"
            runs = rows(label)
            every += runs
            mape, inside, width, pct = figures(runs)
            mean = rollout_mean_ms(label)
            lines.append(
                f"| {words} | {w} | {len(runs)} | {mape} | {inside} | {width} | {pct} "
                f"| {mean:.1f} ms |"
            )
        mape, inside, width, pct = figures(every)
        pooled.append(f"| {words} | {len(every)} | {mape} | {inside} | {width} | {pct} |")
    text = [
        "# Held-out shapes predicted from two singles per W",
        "",
        *lines,
        "",
        f"rollout mean: the calibrated scenario's; the truth is {TRUE_MEAN_MS:.1f} ms as drawn "
        "(the sleeps' own lateness comes on top, in every reading alike).",
        "width: p95 - p5 of the simulated wall-clock over its mean, median over the runs. "
        "mean pct.: the mean share of simulated runs faster than the measured one (0.5 when "
        "the predictions lean neither way).",
        "",
        "| reading | runs | MAPE | inside 5-95% | median width | mean pct. |",
        "|---|---|---|---|---|---|",
        *pooled,
        "",
    ]
    (HERE / "summary.md").write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
