"""The paper study's figures against their predicted intervals: a markdown report on stdout.

    .venv/bin/python experiments/paper/coverage.py > experiments/paper/coverage.md

Reads, for each preset, PRESET.summaries.toml (what the paper reports),
PRESET/inference.txt (each fact against its posterior predictive and one run's
noise, as infer_presets.py wrote it) and PRESET/sweep.json (the nine-shape
sweep `run.sh predict` wrote), and livebench-math/advice/advise.csv. It prints:

- each point fact's width: its predictive 5-95% over one run's noise, both on
  the fact's scale (log for wall-clocks and iterations, logit for shares and
  test scores); a ranged fact's noise spans its range too, so it has none;
- the paper's speed-ups against the sweep's paired speed-up interval (replicate
  r of single over replicate r of the shape: the same parameter draw): the
  single run's wall-clock over each other reported run's, the "3-4x" against
  every 16-way shape, and the shapes whose mean speed-up is 2x or more;
- the paper's test scores against the sweep's test-score interval, which is
  the chosen candidate's expected score: a test set of n examples adds a
  binomial 5-95% of +-1.645 sqrt(p (1 - p) / n) at the reported score p;
- every shape's mean test score, and advise's counts of allocations within the
  deadline, within the cap and both.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRESETS = ("livebench-math", "hover")
Z90 = 1.645  # the normal's 95th percentile: a 5-95% interval is +-Z90 sd

FACT = re.compile(
    r"^  (?P<label>\S.*?)\s+reported (?P<reported>.+?)\s+predicted (?P<median>.+?) "
    r"\[(?P<low>[^,]+), (?P<high>[^\]]+)\]"
)
NOISE = re.compile(r"one run's noise \[(?P<low>[^,]+), (?P<high>[^\]]+)\]")


def number(text: str) -> float:
    """A figure as inference.txt prints it ('7.51 h', '21%', '$13.1', '2.02x'), as a float."""
    value = float(re.sub(r"[^0-9.e+-]", "", text.split()[0].strip("$x%")))
    return value / 100 if text.endswith("%") else value


def on_scale(label: str, value: float) -> float:
    if label.endswith(("share", "score")):
        return math.log(value / (1 - value))
    return math.log(value)


def widths(inference: str) -> list[tuple[str, float]]:
    """(fact, predictive width over one run's noise) for each point fact."""
    lines = inference.splitlines()
    found = []
    for line, below in itertools.pairwise(lines):
        fact, noise = FACT.match(line), NOISE.search(below)
        if fact is None or noise is None or fact["label"].startswith("sweep:"):
            continue
        label = fact["label"]
        predicted = [on_scale(label, number(fact[k])) for k in ("low", "high")]
        spread = [on_scale(label, number(noise[k])) for k in ("low", "high")]
        found.append((label, (predicted[1] - predicted[0]) / (spread[1] - spread[0])))
    return found


def interval(figure: dict[str, float], scale: float = 1.0, digits: int = 2) -> str:
    return (
        f"{figure['mean'] / scale:.{digits}f} "
        f"[{figure['low'] / scale:.{digits}f}, {figure['high'] / scale:.{digits}f}]"
    )


def inside(value: float, figure: dict[str, float]) -> str:
    return "yes" if figure["low"] <= value <= figure["high"] else "no"


def wall_clock_s(run: dict) -> float | None:
    for key, unit in (("wall_clock_hours", 3600), ("wall_clock_minutes", 60)):
        if key in run:
            return run[key] * unit
    return None


def report(preset: str) -> None:
    facts = tomllib.loads((HERE / f"{preset}.summaries.toml").read_text(encoding="utf-8"))
    sweep = json.loads((HERE / preset / "sweep.json").read_text(encoding="utf-8"))
    by_shape = {p["shape"]: p for p in sweep["predictions"]}
    print(f"## {preset}\n")
    print("Point facts: predictive 5-95% width over one run's noise, on the fact's scale\n")
    for label, ratio in widths((HERE / preset / "inference.txt").read_text(encoding="utf-8")):
        print(f"- {label}: {ratio:.2f}")

    print("\nSpeed-ups against the sweep's paired speed-up, mean [5%, 95%]\n")
    print("| reported | shape | reported speed-up | predicted | inside | high / low |")
    print("|---|---|---|---|---|---|")
    runs = facts["runs"]
    single = next(wall_clock_s(r) for r in runs if r["shape"] == "single")
    for run in runs:
        wall = wall_clock_s(run)
        if run["shape"] == "single" or wall is None or single is None:
            continue
        speedup = by_shape[run["shape"]]["speedup"]
        print(
            f"| single over {run['shape']} | {run['shape']} | {single / wall:.2f}x "
            f"| {interval(speedup)} | {inside(single / wall, speedup)} "
            f"| {speedup['high'] / speedup['low']:.2f} |"
        )
    low, high = facts["sweep"]["fastest_speedup"]
    for shape, prediction in by_shape.items():
        p, n = (int(x) for x in shape.split("x")) if "x" in shape else (1, 1)
        if p * n != 16:
            continue
        speedup = prediction["speedup"]
        overlaps = speedup["low"] <= high and low <= speedup["high"]
        holds = speedup["low"] <= low and high <= speedup["high"]
        print(
            f"| fastest {low:g}-{high:g}x | {shape} | {low:g}-{high:g}x | {interval(speedup)} "
            f"| {'yes, all of it' if holds else 'in part' if overlaps else 'no'} "
            f"| {speedup['high'] / speedup['low']:.2f} |"
        )
    batched = [p for s, p in by_shape.items() if s != "single"]
    at_least = facts["sweep"]["most_speedup_at_least"]
    fast = [p["shape"] for p in batched if p["speedup"]["mean"] >= at_least]
    print(
        f"\nShapes whose mean speed-up is {at_least:g}x or more: {len(fast)} of {len(batched)} "
        f"({', '.join(fast)})"
    )

    print("\nTest scores against the sweep's test score (expected), mean [5%, 95%]\n")
    print("| shape | reported | examples | predicted | inside | width | test set's 5-95% |")
    print("|---|---|---|---|---|---|---|")
    for run in runs:
        if "test_score" not in run:
            continue
        score, examples = run["test_score"], run["test_examples"]
        test = by_shape[run["shape"]]["test_score"]
        binomial = Z90 * math.sqrt(score * (1 - score) / examples)
        print(
            f"| {run['shape']} | {score:.3f} | {examples} | {interval(test, digits=3)} "
            f"| {inside(score, test)} | {test['high'] - test['low']:.3f} | +-{binomial:.3f} |"
        )
    means = {s: p["test_score"]["mean"] for s, p in by_shape.items()}
    print(
        "\nMean test score by shape: "
        + ", ".join(f"{s} {m:.3f}" for s, m in means.items())
        + f" (range {min(means.values()):.3f} to {max(means.values()):.3f})\n"
    )


def advice() -> None:
    with (HERE / "livebench-math" / "advice" / "advise.csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    count = {key: sum(r[key] == "True" for r in rows) for key in ("meets_deadline", "within_cap")}
    feasible = sum(r["feasible"] == "True" for r in rows)
    print("## livebench-math advice\n")
    print(
        f"{len(rows)} allocations: {count['meets_deadline']} within the deadline, "
        f"{count['within_cap']} within the cap, {feasible} both"
    )


def main() -> None:
    print(
        "# The paper study's figures against their predicted intervals\n\n"
        "Written by experiments/paper/coverage.py from the committed outputs.\n"
    )
    for preset in PRESETS:
        report(preset)
    advice()


if __name__ == "__main__":
    main()
