"""summary.md: each arm's held-out runs against the three calibrations, side by side.

Reads ARM/validation-WAY/validation.json (`pxn validate --out`) for every arm recorded and
every way it was calibrated, and writes one row per (arm, way): wall-clock error (MAPE of
the predicted mean) and coverage (measured inside the predicted 5-95%), the intervals'
width over the predicted mean; the best validation score's mean absolute error, coverage
and width (p95 - p5).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WAYS = {
    "run_dir": "run_dir alone, total wall-clock given",
    "run_dir-log": "run_dir with DSPy's log lines",
    "run_dir-mlflow": "run_dir with its MLflow run",
    "recorded": "recorded",
}


def row(arm: str, way: str, runs: list[dict]) -> str:
    done = [r for r in runs if r.get("status") == "completed"]
    wall = [abs(r["sim_wall_clock_mean_s"] / r["measured_wall_clock_s"] - 1) for r in done]
    inside = sum(bool(r["inside_interval"]) for r in done)
    width = [(r["sim_wall_clock_p95_s"] - r["sim_wall_clock_p5_s"]) / r["sim_wall_clock_mean_s"]
             for r in done]  # fmt: skip
    scored = [r for r in done if r.get("measured_best_score") is not None]
    best_error = [abs(r["sim_best_score_mean"] - r["measured_best_score"]) for r in scored]
    best_inside = sum(bool(r["best_score_inside"]) for r in scored)
    best_width = [r["sim_best_score_p95"] - r["sim_best_score_p5"] for r in scored]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    best = (
        f"{mean(best_error):.3f} | {best_inside}/{len(scored)} | {mean(best_width):.2f}"
        if scored
        else "- | - | -"
    )
    return (
        f"| {arm} | {WAYS[way]} | {len(done)} | {mean(wall):.1%} | {inside}/{len(done)} | "
        f"{mean(width):.0%} | {best} |"
    )


def main() -> None:
    lines = [
        "# What not recording costs: held-out runs predicted from one run, three ways",
        "",
        "| arm | calibrated from | runs | wall-clock MAPE | coverage | width | "
        "best-score error | coverage | width |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in sorted(p.name for p in HERE.iterdir() if (p / "runs").is_dir()):
        for way in WAYS:
            found = HERE / arm / f"validation-{way}" / "validation.json"
            if found.exists():
                lines.append(row(arm, way, json.loads(found.read_text())["runs"]))
    (HERE / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
