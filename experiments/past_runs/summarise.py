"""summary.md: each arm's held-out runs against its calibrations, side by side.

    .venv/bin/python experiments/past_runs/summarise.py

Reads ARM/validation-WAY/validation.json (`pxn validate --out`) for every arm recorded and
every way it was calibrated, and writes:

- one row per (arm, way): the wall-clock's error (MAPE of the predicted mean), coverage
  (held-out runs whose measured wall-clock lies inside the predicted 5-95%) and the
  intervals' width (p95 - p5 over the predicted mean, averaged over the runs); the best
  validation score's mean absolute error, coverage and width (p95 - p5, in score units);
- whether the target holds: coverage of at least 80% in every column, however wide;
- the same rows for each of the LM arms' later sittings alone: runs recorded after a
  round of changes the earlier sittings' misses led to (README, "Results");
- per arm, every held-out run's measured values beside each way's predicted 5-95%.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WAYS = {
    "run_dir": "run_dir alone, total wall-clock given",
    "run_dir-mlflow": "run_dir with its MLflow run",
    "run_dir-log": "run_dir with DSPy's log lines",
    "recorded": "recorded",
}
TARGET = 0.8
HEADER = [
    "| arm | calibrated from | runs | wall-clock MAPE | coverage | width | "
    "best-score error | coverage | width |",
    "|---|---|---|---|---|---|---|---|---|",
]
# The LM arms' later sittings: (name, runs, when they were recorded).
LATER_SITTINGS = (
    ("third", ("1x1-s3", "2x2-s2", "4x1-s2"),
     "recorded after the second round of changes, before the third"),
    ("fourth", ("1x1-s4", "2x2-s3", "4x1-s3"),
     "recorded after the third round of changes: no change has seen them"),
)  # fmt: skip


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def completed(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r.get("status") == "completed"]


def scored(runs: list[dict]) -> list[dict]:
    return [r for r in completed(runs) if r.get("sim_best_score_mean") is not None]


def row(arm: str, way: str, runs: list[dict]) -> tuple[str, list[str]]:
    """The table's row, and what misses the target (empty when it holds)."""
    done = completed(runs)
    wall = [abs(r["sim_wall_clock_mean_s"] / r["measured_wall_clock_s"] - 1) for r in done]
    inside = sum(bool(r["inside_interval"]) for r in done)
    width = [(r["sim_wall_clock_p95_s"] - r["sim_wall_clock_p5_s"]) / r["sim_wall_clock_mean_s"]
             for r in done]  # fmt: skip
    best = scored(runs)
    best_error = [abs(r["sim_best_score_mean"] - r["measured_best_score"]) for r in best]
    best_inside = sum(bool(r["best_score_inside"]) for r in best)
    best_width = [r["sim_best_score_p95"] - r["sim_best_score_p5"] for r in best]
    misses = []
    if done and inside / len(done) < TARGET:
        misses.append(f"wall-clock coverage {inside}/{len(done)}")
    if best and best_inside / len(best) < TARGET:
        misses.append(f"best-score coverage {best_inside}/{len(best)}")
    if not best:
        misses.append("no best score predicted (no validation scores read)")
    score = (
        f"{mean(best_error):.3f} | {best_inside}/{len(best)} | {mean(best_width):.2f}"
        if best
        else "- | - | -"
    )
    line = (
        f"| {arm} | {WAYS[way]} | {len(done)} | {mean(wall):.1%} | {inside}/{len(done)} | "
        f"{mean(width):.0%} | {score} |"
    )
    return line, misses


def run_name(r: dict) -> str:
    return Path(r["run"]).parent.name


def seconds(value: float) -> str:
    return f"{value:,.0f}"


def per_run(arm: str, found: dict[str, list[dict]]) -> list[str]:
    """Every held-out run: measured, and each way's predicted 5-95% (wall-clock in s; best
    score); `*` marks a measured value outside the interval."""
    ways = list(found)
    lines = [
        f"### {arm}: each held-out run",
        "",
        "Wall-clock in seconds, measured and each way's predicted 5-95% (`*`: outside); "
        "best validation score the same way.",
        "",
        "| run | measured s | " + " | ".join(ways) + " | best score | "
        + " | ".join(ways) + " |",
        "|---|---|" + "---|" * len(ways) + "---|" + "---|" * len(ways),
    ]  # fmt: skip
    by_run: dict[str, dict[str, dict]] = {}
    for way, runs in found.items():
        for r in completed(runs):
            by_run.setdefault(run_name(r), {})[way] = r
    for run, of in by_run.items():
        first = next(iter(of.values()))
        wall = []
        best = []
        for way in ways:
            r = of.get(way)
            if r is None:
                wall.append("")
                best.append("")
                continue
            mark = "" if r["inside_interval"] else " *"
            wall.append(
                f"{seconds(r['sim_wall_clock_p5_s'])}-{seconds(r['sim_wall_clock_p95_s'])}{mark}"
            )
            if r.get("sim_best_score_mean") is None:
                best.append("-")
            else:
                mark = "" if r["best_score_inside"] else " *"
                best.append(f"{r['sim_best_score_p5']:.2f}-{r['sim_best_score_p95']:.2f}{mark}")
        measured_best = first.get("measured_best_score")
        lines.append(
            f"| {run} | {seconds(first['measured_wall_clock_s'])} | " + " | ".join(wall)
            + f" | {'-' if measured_best is None else f'{measured_best:.2f}'} | "
            + " | ".join(best) + " |"
        )  # fmt: skip
    return [*lines, ""]


def main() -> None:
    lines = [
        "# What not recording costs: held-out runs predicted from one run, each way",
        "",
        "Written by experiments/past_runs/summarise.py from ARM/validation-WAY/validation.json.",
        "Coverage: held-out runs whose measured value lies inside the predicted 5-95%; "
        "wall-clock width: (p95 - p5) / predicted mean; best-score width: p95 - p5.",
        "",
        *HEADER,
    ]
    verdicts, details = [], []
    later: dict[str, list[str]] = {sitting: [] for sitting, _, _ in LATER_SITTINGS}
    for arm in sorted(p.name for p in HERE.iterdir() if (p / "runs").is_dir()):
        found = {}
        for way in WAYS:
            path = HERE / arm / f"validation-{way}" / "validation.json"
            if path.exists():
                found[way] = json.loads(path.read_text())["runs"]
        for way, runs in found.items():
            line, misses = row(arm, way, runs)
            lines.append(line)
            verdict = "met" if not misses else "not met: " + ", ".join(misses)
            verdicts.append(f"- {arm}, {WAYS[way]}: {verdict}")
            for sitting, names, _ in LATER_SITTINGS:
                theirs = [r for r in runs if run_name(r) in names]
                if theirs:
                    later[sitting].append(row(arm, way, theirs)[0])
        if found:
            details += per_run(arm, found)
    lines += ["", f"Target: coverage >= {TARGET:.0%} in every column, however wide.", ""]
    lines += [*verdicts, ""]
    for sitting, names, when in LATER_SITTINGS:
        if later[sitting]:
            lines += [
                f"The LM arms' {sitting} sitting alone ({', '.join(names)}), {when}.",
                "",
                *HEADER,
                *later[sitting],
                "",
            ]
    lines += details
    (HERE / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
