"""The presets' learning curves against what the paper reports, and its "faster and better".

    .venv/bin/python experiments/learning_curves_evidence/presets.py

The paper (arXiv 2610.36774; /work/shared/notes/paper.md's summary) reports no learning
curve: each shape was run once, at one budget (LiveBench-Math 5000 metric calls, HoVer
3000), and its held-out test score is given for single and one batched shape (LiveBench-
Math single 0.689, 2x2 0.721; HoVer single 0.49, 8x1 0.60), with the wall-clock of
LiveBench-Math's single (7.7 h) and 2x2 (4.1 h) and of HoVer's single (47 min). These are
the points a curve can be set against; they are also among the facts the presets were
inferred from (experiments/paper), so matching them is consistency, not evidence.

"Faster and better", read as the issue reads it: the score each shape reaches by the
time the single ends its run at the paper's budget. For each preset, `pxn sweep --budgets`
predicts every shape at budgets from the paper's to four times it (one run a replicate,
read at each); the single's mean wall-clock at the paper's budget is the deadline, and
each shape's expected test score (and best validation score) at that wall-clock is read
off its curve, linear in log wall-clock between the budgets that bracket it, with the
budget it reaches (linear in log budget). Outputs: presets/PRESET/ (the sweep's table,
CSV, JSON, figures), presets/summary.md and presets/faster-and-better.png.
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent.relative_to(ROOT)
PXN = Path(sys.executable).parent / "pxn"


@dataclass(frozen=True)
class Setup:
    preset: str
    budget: int  # the paper's
    budgets: tuple[int, ...]  # asked of the sweep: the paper's to four times it
    shapes: tuple[str, ...]  # single first
    # shape -> (test score, wall-clock in hours or None) as the paper reports them
    paper: dict[str, tuple[float, float | None]]


SETUPS = (
    Setup(
        "livebench-math",
        5000,
        (5000, 7000, 10000, 14000, 20000),
        ("single", "2x2", "4x4"),
        {"single": (0.689, 7.7), "2x2": (0.721, 4.1)},
    ),
    Setup(
        "hover",
        3000,
        (3000, 4200, 6000, 8500, 12000),
        ("single", "2x2", "8x1"),
        {"single": (0.49, 47 / 60), "8x1": (0.60, None)},
    ),
)


@dataclass(frozen=True)
class Point:
    """One shape at one budget, as sweep.csv gives it."""

    budget: int
    wall_clock: float  # mean seconds
    test: float  # mean expected test score
    test_low: float
    test_high: float
    best: float  # mean best validation score


def curves(sweep_csv: Path) -> dict[str, list[Point]]:
    """shape -> its points, smallest budget first."""
    found: dict[str, list[Point]] = {}
    with sweep_csv.open() as f:
        for row in csv.DictReader(f):
            found.setdefault(row["shape"], []).append(
                Point(
                    budget=int(row["budget"]),
                    wall_clock=float(row["wall_clock_mean_s"]),
                    test=float(row["test_score_mean"]),
                    test_low=float(row["test_score_p5"]),
                    test_high=float(row["test_score_p95"]),
                    best=float(row["best_score_mean"]),
                )
            )
    return {shape: sorted(points, key=lambda p: p.budget) for shape, points in found.items()}


@dataclass(frozen=True)
class Reached:
    """What a shape reaches by a wall-clock: None past its curve's last budget."""

    budget: float | None
    test: float | None
    best: float | None


def at_wall_clock(points: Sequence[Point], seconds: float) -> Reached:
    """The curve read at `seconds` of mean wall-clock: the test and best scores linear in
    log wall-clock between the two budgets that bracket it, the budget linear in log
    budget; a wall-clock before the first budget's is read at the first (a shape is
    not asked for less than the paper's budget)."""
    if seconds <= points[0].wall_clock:
        first = points[0]
        return Reached(first.budget, first.test, first.best)
    for before, after in itertools.pairwise(points):
        if seconds <= after.wall_clock:
            share = math.log(seconds / before.wall_clock) / math.log(
                after.wall_clock / before.wall_clock
            )
            budget = before.budget * (after.budget / before.budget) ** share
            return Reached(
                budget,
                before.test + share * (after.test - before.test),
                before.best + share * (after.best - before.best),
            )
    return Reached(None, None, None)


def sweep(setup: Setup) -> Path:
    out = HERE / "presets" / setup.preset
    (ROOT / out).mkdir(parents=True, exist_ok=True)
    command = ["nice", "-n", "5", str(PXN), "sweep", setup.preset,
               "--budgets", ",".join(map(str, setup.budgets)), "--shapes", ",".join(setup.shapes),
               "--reps", "200", "--seed", "0", "--jobs", "2", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    (ROOT / out / "table.txt").write_text(done.stdout)  # stderr: the work's progress
    if done.returncode != 0:
        raise SystemExit(f"pxn sweep ended {done.returncode}: {done.stderr[-2000:]}")
    return ROOT / out / "sweep.csv"


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def report(setup: Setup, found: dict[str, list[Point]]) -> list[str]:
    deadline = found["single"][0].wall_clock
    lines = [
        f"## {setup.preset}: B = {setup.budget}, the single's mean wall-clock {hours(deadline)}",
        "",
        "| shape | paper: test score | paper: wall-clock | preset at B: test [5-95%] "
        "| wall-clock at B | gain per doubling (B to 2B, interpolated) "
        "| by the single's wall-clock: budget | test | best val | test over the single's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    single = at_wall_clock(found["single"], deadline)
    for shape in setup.shapes:
        points = found[shape]
        at_b = points[0]
        doubled = at_wall_clock(points, wall_clock_at_budget(points, 2 * setup.budget))
        per_doubling = "-" if doubled.test is None else f"{doubled.test - at_b.test:+.3f}"
        reached = at_wall_clock(points, deadline)
        test_paper, hours_paper = setup.paper.get(shape, (None, None))
        if reached.test is None:
            cells = f"past {setup.budgets[-1]} | - | - | -"
        else:
            assert single.test is not None and reached.budget is not None
            cells = (
                f"{reached.budget:,.0f} | {reached.test:.3f} | {reached.best:.3f} "
                f"| {reached.test - single.test:+.3f}"
            )
        lines.append(
            f"| {shape} | {'-' if test_paper is None else f'{test_paper:.3f}'} "
            f"| {'-' if hours_paper is None else hours(hours_paper * 3600)} "
            f"| {at_b.test:.3f} [{at_b.test_low:.3f}-{at_b.test_high:.3f}] "
            f"| {hours(at_b.wall_clock)} | {per_doubling} | {cells} |"
        )
    return lines


def wall_clock_at_budget(points: Sequence[Point], budget: int) -> float:
    """The mean wall-clock at `budget`, linear in log budget between the points asked."""
    for before, after in itertools.pairwise(points):
        if budget <= after.budget:
            share = math.log(budget / before.budget) / math.log(after.budget / before.budget)
            return before.wall_clock * (after.wall_clock / before.wall_clock) ** share
    return points[-1].wall_clock


def figure(found: dict[str, dict[str, list[Point]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(SETUPS), figsize=(12, 4.4))
    for ax, setup in zip(axes, SETUPS, strict=True):
        shapes = found[setup.preset]
        deadline = shapes["single"][0].wall_clock / 3600
        for shape, color in zip(setup.shapes, ("black", "tab:blue", "tab:orange"), strict=True):
            points = shapes[shape]
            x = [p.wall_clock / 3600 for p in points]
            ax.fill_between(x, [p.test_low for p in points], [p.test_high for p in points],
                            color=color, alpha=0.06)  # fmt: skip
            ax.plot(x, [p.test for p in points], color=color, marker="o", ms=3,
                    label=f"{shape}: expected test score, 5-95%")  # fmt: skip
            test, when = setup.paper.get(shape, (None, None))
            if test is not None and when is not None:
                ax.plot([when], [test], marker="*", ms=13, color=color, linestyle="none",
                        label=f"{shape}: the paper's run at B")  # fmt: skip
            elif test is not None:  # no wall-clock reported: drawn at the preset's, hollow
                ax.plot([points[0].wall_clock / 3600], [test], marker="*", ms=13,
                        markerfacecolor="none", color=color, linestyle="none",
                        label=f"{shape}: the paper's run at B (its wall-clock not reported: "
                        "drawn at the preset's)")  # fmt: skip
        ax.axvline(deadline, color="0.4", linestyle=":", label="the single's wall-clock at B")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_xlabel("mean wall-clock (hours)")
        ax.set_title(f"{setup.preset}: B = {setup.budget} to {setup.budgets[-1]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("test score")
    fig.tight_layout()
    fig.savefig(ROOT / HERE / "presets" / "faster-and-better.png", dpi=110)
    plt.close(fig)


def main() -> None:
    found = {setup.preset: curves(sweep(setup)) for setup in SETUPS}
    lines = [
        "# The presets against the paper",
        "",
        "Made by presets.py (its docstring says how the tables are read).",
        "",
    ]
    for setup in SETUPS:
        lines += [*report(setup, found[setup.preset]), ""]
    lines.append(
        "preset at B: the expected test score at the paper's budget, mean [5-95%] over 200 "
        "replicates; gain per doubling: at 2B less at B; by the single's wall-clock: what "
        "the shape reaches by the single's mean wall-clock at B (the budget, the test and "
        "best validation scores read off its curve), and its test score less the single's."
    )
    (ROOT / HERE / "presets" / "summary.md").write_text("\n".join(lines) + "\n")
    figure(found)


if __name__ == "__main__":
    main()
