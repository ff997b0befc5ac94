"""Calibrated from the singles and ONE batched run: every choice of that run.

    .venv/bin/python experiments/local_validation/one_batched.py experiments/local_validation

A user who calibrates from singles alone gets the singles' acceptance for
batched steps; on this task batched steps accept less (diagnosis.md). Adding one
small batched run to the calibration set lets `pxn calibrate` fit the batched
steps' ratio (`acceptance.batched`). Which run a user adds is luck, so each of
the 25 batched runs at the singles' W = 2 of the first three sittings (the
fourth ran on another day's machine: sittings.py) is tried in turn: calibrate from the
eight singles and it (100 parameter draws, as `pxn calibrate`), then validate
the other 32 held-out runs (400 replicates each, as `pxn validate`). Markdown on
stdout; DIR/one-batched.csv (one row per choice and held-out run) and
DIR/one-batched.png (each choice's coverage against the ratio it fitted, beside
the ratio of every batched run pooled).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from statistics import mean, median

from diagnose import accepted_and_judged  # beside this script
from matplotlib.figure import Figure
from sittings import calibration_single, earlier_batched

from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.checks.validate import validate_runs

DRAWS = 100
REPLICATES = 400
TARGET = 0.8  # the project's coverage aim for its 5-95% intervals


def main(here: Path) -> None:
    runs = sorted(p for p in (here / "runs").iterdir() if (p / "trace.jsonl").exists())
    singles = [r for r in runs if calibration_single(r.name)]
    batched = [r for r in runs if earlier_batched(r.name)]
    choices = [r for r in batched if "-w2-" in r.name]
    rows, per_choice = [], []
    for number, choice in enumerate(choices, start=1):
        print(f"[{number}/{len(choices)}] {choice.name}", file=sys.stderr)
        cal = calibrate_traces([*singles, choice], draws=DRAWS)
        held_out = [r for r in batched if r != choice]
        checks = validate_runs(cal.scenario, held_out, REPLICATES).counted
        fit = cal.acceptance.batched
        for c in checks:
            rows.append(
                {
                    "choice": choice.name,
                    "ratio": fit.ratio,
                    "run": Path(c.run).parent.name,
                    "measured_s": c.wall_clock,
                    "sim_mean_s": c.predicted.wall_clock.mean,
                    "sim_p5_s": c.predicted.wall_clock.low,
                    "sim_p95_s": c.predicted.wall_clock.high,
                    "inside": c.inside,
                    "percentile": c.percentile,
                    "sim_error": c.sim_error,
                    "analytic_error": c.analytic_error,
                }
            )
        per_choice.append((choice.name, fit, checks))
    write_csv(here / "one-batched.csv", rows)
    report(per_choice, rows)
    figure(per_choice, pooled_ratio(singles, batched), here / "one-batched.png")


def pooled_ratio(singles: list[Path], batched: list[Path]) -> float:
    """Every batched run's acceptance, pooled, over the singles' pooled."""
    rates = []
    for runs in (batched, singles):
        counts = [accepted_and_judged(run) for run in runs]
        rates.append(sum(a for a, _ in counts) / sum(n for _, n in counts))
    return rates[0] / rates[1]


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def report(per_choice: list, rows: list[dict]) -> None:
    print(
        "| batched run calibrated from | its acceptance | fitted ratio [95%] | held-out "
        "coverage | simulator MAPE | mean percentile | closed-form MAPE |\n"
        "|---|---|---|---|---|---|---|"
    )
    coverages = []
    for name, fit, checks in per_choice:
        accepted, judged = fit.batched
        inside = sum(c.inside for c in checks)
        coverages.append(inside / len(checks))
        print(
            f"| {name} | {accepted}/{judged} | {fit.ratio:.2f} [{fit.interval[0]:.2f}, "
            f"{fit.interval[1]:.2f}] | {inside}/{len(checks)} ({inside / len(checks):.0%}) | "
            f"{mean(abs(c.sim_error) for c in checks):.1%} | "
            f"{mean(c.percentile for c in checks):.2f} | "
            f"{mean(abs(c.analytic_error) for c in checks):.1%} |"
        )
    inside = sum(r["inside"] for r in rows)
    reaching = sum(c >= TARGET for c in coverages)
    print(
        f"\nOver the {len(per_choice)} choices, {len(rows)} predictions of held-out runs: "
        f"**{inside} inside their 5-95% interval ({inside / len(rows):.0%})**, simulator MAPE "
        f"{mean(abs(r['sim_error']) for r in rows):.1%}, mean percentile "
        f"{mean(r['percentile'] for r in rows):.2f}, closed-form MAPE "
        f"{mean(abs(r['analytic_error']) for r in rows):.1%}. Coverage per choice: median "
        f"{median(coverages):.0%}, from {min(coverages):.0%} to {max(coverages):.0%}; "
        f"{reaching} of {len(coverages)} choices reach {TARGET:.0%}."
    )


def figure(per_choice: list, pooled: float, out: Path) -> None:
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.subplots()
    ratios = [fit.ratio for _, fit, _ in per_choice]
    coverage = [sum(c.inside for c in checks) / len(checks) for _, _, checks in per_choice]
    shapes = sorted({name.split("-")[0] for name, _, _ in per_choice})
    for shape in shapes:
        points = [
            (r, c)
            for (name, _, _), r, c in zip(per_choice, ratios, coverage, strict=True)
            if name.startswith(shape + "-")
        ]
        ax.scatter(*zip(*points, strict=True), label=shape, s=36, alpha=0.8)
    ax.axhline(0.9, color="0.3", linestyle="--", linewidth=1, label="nominal 90%")
    ax.axhline(TARGET, color="tab:red", linestyle=":", linewidth=1, label="aim 80%")
    ax.axvline(pooled, color="0.5", linestyle="-.", linewidth=1, label="all batched runs' ratio")
    ax.set_xlabel("batched steps' acceptance over the singles' (fitted from the one run)")
    ax.set_ylabel("held-out runs inside the 5-95% interval")
    ax.set_ylim(0.5, 1.0)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_title("Calibrated from the 8 singles and one batched run, each choice of it")
    ax.legend(title="the one run's shape", fontsize=8, ncols=2)
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
