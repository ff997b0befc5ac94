"""Predicted against measured for the advise check: a Markdown table and a figure.

    .venv/bin/python experiments/advise_check/compare.py experiments/advise_check

Reads what `pxn advise` predicted (advice/advise.json) and each real run of a
picked allocation (runs/PxN-bB-sS/result.json: wall-clock to the end of
gepa's last iteration), prints the comparison as Markdown, and draws
comparison.png: each allocation's predicted mean and 5-95% band beside its
measured runs.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from matplotlib.figure import Figure
from scipy.stats import spearmanr

from pxn.api.plots import save_figure


def main() -> None:
    here = Path(sys.argv[1])
    advice = json.loads((here / "advice" / "advise.json").read_text(encoding="utf-8"))
    predicted = {(r["p"], r["n"], r["b"]): r for r in advice["allocations"]}
    measured: dict[tuple[int, int, int], list[float]] = {}
    for result in sorted(here.glob("runs/*/result.json")):
        name = re.fullmatch(r"(\d+)x(\d+)-b(\d+)-s\d+", result.parent.name)
        if name is None:  # the calibration runs (cal-*)
            continue
        data = json.loads(result.read_text(encoding="utf-8"))
        measured.setdefault(tuple(int(x) for x in name.groups()), []).append(data["wall_clock_s"])
    checked = sorted(measured, key=lambda a: predicted[a]["wall_clock_mean_s"])
    ranks = sorted(predicted.values(), key=lambda r: r["wall_clock_mean_s"])
    rank_of = {(r["p"], r["n"], r["b"]): i + 1 for i, r in enumerate(ranks)}

    print(f"Budget B = {advice['ask']['budget']} metric calls, W = 2, search: {advice['search']}.")
    print()
    print(
        "| allocation | predicted rank (of "
        f"{len(ranks)}) | predicted mean [5-95%] | measured runs | measured mean | error |"
    )
    print("|---|---|---|---|---|---|")
    means = []
    for a in checked:
        r, runs = predicted[a], measured[a]
        mean = statistics.fmean(runs)
        means.append(mean)
        error = (r["wall_clock_mean_s"] - mean) / mean
        inside = sum(r["wall_clock_p5_s"] <= x <= r["wall_clock_p95_s"] for x in runs)
        print(
            f"| {a[0]}x{a[1]} b={a[2]}{' (recommended)' if r['recommended'] else ''} "
            f"| {rank_of[a]} | {r['wall_clock_mean_s']:.1f} s "
            f"[{r['wall_clock_p5_s']:.1f}-{r['wall_clock_p95_s']:.1f}] "
            f"| {', '.join(f'{x:.1f} s' for x in runs)} ({inside}/{len(runs)} inside) "
            f"| {mean:.1f} s | {error:+.1%} |"
        )
    order = sorted(range(len(checked)), key=lambda i: means[i])
    print()
    print(
        "Measured order, fastest first: "
        + ", ".join(f"{checked[i][0]}x{checked[i][1]} b={checked[i][2]}" for i in order)
        + f"; predicted order the same: {'yes' if order == sorted(order) else 'no'}"
        + f" (Spearman {spearmanr(range(len(checked)), means).statistic:.2f})."
    )

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    for i, a in enumerate(checked):
        r = predicted[a]
        ax.plot([i, i], [r["wall_clock_p5_s"], r["wall_clock_p95_s"]], color="tab:blue", lw=8,
                alpha=0.3, label="predicted 5-95%" if i == 0 else None)  # fmt: skip
        ax.plot(i, r["wall_clock_mean_s"], "o", color="tab:blue",
                label="predicted mean" if i == 0 else None)  # fmt: skip
        ax.plot([i] * len(measured[a]), measured[a], "x", color="tab:red", markersize=9,
                label="measured runs" if i == 0 else None)  # fmt: skip
    ax.set_xticks(range(len(checked)), [f"{p}x{n} b={b}" for p, n, b in checked])
    ax.set_ylabel("wall-clock (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"pxn advise on the local LM pool: B={advice['ask']['budget']}, W=2")
    ax.legend(fontsize="small")
    save_figure(fig, here / "comparison.png")


if __name__ == "__main__":
    main()
