"""Why the held-out misses miss: acceptance by shape, and where a 4x4 run's time goes,
measured against simulated. Markdown on stdout.

    .venv/bin/python experiments/local_validation/diagnose.py experiments/local_validation

Reads DIR/runs/*/trace.jsonl of the first three sittings (sittings.py) and
DIR/calibrated-point.toml (as `run.sh analyse` writes it). Part 1: per-proposal
acceptance by shape, and how often a step of four proposals accepted none
(against what independent proposals at the shape's own rate give); then singles
against batched runs by the parent's own score on its minibatch (gepa accepts a
child that beats it there), by whether the parent is the seed, and by whether
the run had proposed from the same parent on the same minibatch before, to see
whether the gap is one of which parents are drawn or of the proposals
themselves; then the singles' rollout latency by the candidate it ran. Part 2:
each 4x4 run's stage time, summed by stage, against the mean of 20 simulated
replicates of the point estimate at the run's own W and C; and the reflection
stage's throughput (server-seconds per reflection). Draws DIR/acceptance.png:
each run's acceptance by shape against the singles' rate.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from scipy.stats import binomtest
from sittings import fourth_sitting  # beside this script

from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import TraceWriter

SERVERS = 2  # the study's llama.cpp servers
REPLICATES = 20


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def stage_seconds(trace: list[dict]) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for e in trace:
        if e["kind"] == "stage":
            seconds[e["name"]] += e["end"] - e["start"]
    return seconds


def accepted_and_judged(run: Path) -> tuple[int, int]:
    """A run's accepted proposals and all it judged."""
    decisions = [e for e in events(run / "trace.jsonl") if e["kind"] == "decision"]
    return sum(bool(e["accepted"]) for e in decisions), len(decisions)


def acceptance_by_shape(runs: list[Path]) -> None:
    proposals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    steps_of_four: list[int] = []
    for run in runs:
        shape = run.name.split("-")[0]
        per_step: dict[int, int] = defaultdict(int)
        made: dict[int, int] = defaultdict(int)
        for e in events(run / "trace.jsonl"):
            if e["kind"] == "decision":
                proposals[shape][0] += 1
                proposals[shape][1] += bool(e["accepted"])
                made[e["iteration"]] += 1
                per_step[e["iteration"]] += bool(e["accepted"])
        steps_of_four += [per_step[i] for i, k in made.items() if k == 4]
    print("| shape | accepted / proposals | rate |\n|---|---|---|")
    for shape, (n, accepted) in sorted(proposals.items()):
        print(f"| {shape} | {accepted}/{n} | {accepted / n:.2f} |")
    batched = [s for s in proposals if s != "1x1"]
    rate = sum(proposals[s][1] for s in batched) / sum(proposals[s][0] for s in batched)
    singles = proposals["1x1"][1] / proposals["1x1"][0]
    se = np.sqrt(
        singles * (1 - singles) / proposals["1x1"][0]
        + rate * (1 - rate) / sum(proposals[s][0] for s in batched)
    )
    print(
        f"\nSingles {singles:.3f} against batched {rate:.3f}: {(singles - rate) / se:.1f} binomial "
        "standard errors apart (proposals pooled, differences between runs ignored)."
    )
    none = sum(k == 0 for k in steps_of_four)
    print(
        f"\nSteps of four proposals (2x2, 4x1): {none} of {len(steps_of_four)} accepted none; "
        f"independent proposals at the batched runs' rate {rate:.2f} give "
        f"{(1 - rate) ** 4 * len(steps_of_four):.1f}.\n"
    )


def score_band(score: float) -> str:
    return "0" if score == 0 else ("in (0, 1)" if score < 1 else "1 or more")


def minibatches(trace: list[dict]) -> dict[str, frozenset[str]]:
    """Each proposal's minibatch: the examples its child was evaluated on."""
    examples: dict[str, set[str]] = defaultdict(set)
    for e in trace:
        if e["kind"] == "rollout" and e["phase"] == "child_minibatch":
            examples[e["candidate"]].add(e["example"])
    return {proposal: frozenset(names) for proposal, names in examples.items()}


def acceptance_by_parent(runs: list[Path]) -> None:
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    proposals: dict[str, int] = defaultdict(int)
    for run in runs:
        group = "singles" if run.name.startswith("1x1") else "batched"
        trace = events(run / "trace.jsonl")
        minibatch_of = minibatches(trace)
        pairs: set[tuple[str, frozenset[str]]] = set()
        for e in (e for e in trace if e["kind"] == "decision"):
            proposals[group] += 1
            pair = (e["parent"], minibatch_of.get(e["proposal"], frozenset()))
            for by, value in (
                ("minibatch score", score_band(e["score_before"])),
                ("parent", "the seed" if e["parent"] == "0" else "a child"),
                ("(parent, minibatch)", "proposed from before" if pair in pairs else "first"),
            ):
                counts[(by, value, group)][0] += 1
                counts[(by, value, group)][1] += bool(e["accepted"])
            pairs.add(pair)
    print(
        "| parent's | value | singles: accepted / proposals (share of proposals) "
        "| batched: accepted / proposals (share) |\n|---|---|---|---|"
    )
    rows = [("minibatch score", band) for band in ("0", "in (0, 1)", "1 or more")]
    rows += [("parent", "the seed"), ("parent", "a child")]
    rows += [("(parent, minibatch)", "first"), ("(parent, minibatch)", "proposed from before")]
    for by, value in rows:
        cells = []
        for group in ("singles", "batched"):
            n, accepted = counts[(by, value, group)]
            share = f"{accepted / n:.2f}" if n else "-"
            cells.append(f"{accepted}/{n} = {share} ({n / proposals[group]:.0%})")
        print(f"| {by} | {value} | {cells[0]} | {cells[1]} |")
    print()


def stages_of_4x4(here: Path, runs: list[Path]) -> None:
    point = Scenario.load(here / "calibrated-point.toml")
    print("| run | stage | measured | simulated (mean of 20) |\n|---|---|---|---|")
    for run in (r for r in runs if r.name.startswith("4x4")):
        trace = events(run / "trace.jsonl")
        start = trace[0]
        scenario = point.replace(
            workers=start["workers"], reflection_concurrency=start["reflection_concurrency"]
        )
        simulated: dict[str, list[float]] = defaultdict(list)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(REPLICATES):
                writer = TraceWriter(Path(tmp) / f"{r}.jsonl")
                simulate_once(scenario, Shape(4, 4), r, writer)
                writer.close()
                for name, s in stage_seconds(events(Path(tmp) / f"{r}.jsonl")).items():
                    simulated[name].append(s)
        measured = stage_seconds(trace)
        for name, s in measured.items():
            print(f"| {run.name} | {name} | {s:.1f} s | {np.mean(simulated[name]):.1f} s |")
        reflections = [e for e in trace if e["kind"] == "reflection"]
        per_reflection = SERVERS * measured["reflection"] / len(reflections)
        print(
            f"| {run.name} | reflection throughput | {per_reflection:.2f}"
            f" server-s per reflection ({len(reflections)} reflections) | "
            f"{point.reflection.mean():.2f} s alone (the singles' mean) |"
        )


def rollouts_by_candidate(runs: list[Path]) -> None:
    """The singles' rollouts by the candidate they ran: log latency less its (W, phase)
    mean, the seed against its children, and the spread between candidates (one-way
    random effects, method of moments, with the F ratio of between to within)."""
    rows = []  # (run, candidate, W, phase, log latency)
    for run in (r for r in runs if r.name.startswith("1x1")):
        trace = events(run / "trace.jsonl")
        decisions = [e for e in trace if e["kind"] == "decision"]
        joined = {e["proposal"]: e["candidate"] for e in decisions if e["candidate"]}
        workers = trace[0]["workers"]
        for e in (e for e in trace if e["kind"] == "rollout"):
            candidate = joined.get(e["candidate"], e["candidate"])
            rows.append((run.name, candidate, workers, e["phase"], np.log(e["end"] - e["start"])))
    by_setting: dict[tuple, list[float]] = defaultdict(list)
    for _, _, workers, phase, value in rows:
        by_setting[(workers, phase)].append(value)
    centre = {key: float(np.mean(values)) for key, values in by_setting.items()}
    by_candidate: dict[tuple, list[float]] = defaultdict(list)
    for run, candidate, workers, phase, value in rows:
        by_candidate[(run, candidate)].append(value - centre[(workers, phase)])
    seed = [x for (_, c), xs in by_candidate.items() if c == "0" for x in xs]
    children = [x for (_, c), xs in by_candidate.items() if c != "0" for x in xs]
    groups = [np.array(xs) for xs in by_candidate.values()]
    sizes = np.array([len(g) for g in groups], dtype=float)
    means = np.array([g.mean() for g in groups])
    n, k = sizes.sum(), len(groups)
    within = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / (n - k)
    between = float((sizes * (means - np.sum(sizes * means) / n) ** 2).sum()) / (k - 1)
    per_group = (n - float((sizes**2).sum()) / n) / (k - 1)
    spread = np.sqrt(max(0.0, (between - within) / per_group))
    print(
        f"Singles' rollouts, log latency less its (W, phase) mean: the seed's {len(seed)} "
        f"{np.mean(seed):+.3f}, its children's {len(children)} {np.mean(children):+.3f} "
        f"(the seed {1 - np.exp(np.mean(seed) - np.mean(children)):.1%} faster). Between "
        f"{k} candidates (of their runs) the log-sd is {spread:.3f}, within one "
        f"{np.sqrt(within):.3f} (F = {between / within:.2f}).\n"
    )


def acceptance_figure(runs: list[Path], out: Path) -> None:
    """Each run's accepted share of its proposals by shape, each shape's pooled rate with
    its Wilson 95% interval, and the singles' rate the calibrated scenario assumes."""
    by_shape: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for run in runs:
        by_shape[run.name.split("-")[0]].append(accepted_and_judged(run))
    shapes = sorted(by_shape, key=lambda s: (s != "1x1", s))
    figure = Figure(figsize=(7, 4))
    axes = figure.add_subplot()
    for x, shape in enumerate(shapes):
        counts = by_shape[shape]
        accepted, judged = sum(a for a, _ in counts), sum(n for _, n in counts)
        low, high = binomtest(accepted, judged).proportion_ci(method="wilson")
        rate = accepted / judged
        axes.errorbar(x, rate, yerr=[[rate - low], [high - rate]], fmt="s", color="tab:blue",
                      capsize=4, label="pooled rate, Wilson 95%" if x == 0 else None)  # fmt: skip
        axes.scatter([x + 0.15] * len(counts), [a / n for a, n in counts], color="black", s=12,
                     label="one run" if x == 0 else None)  # fmt: skip
    singles = sum(a for a, _ in by_shape["1x1"]) / sum(n for _, n in by_shape["1x1"])
    assumed = f"the singles' rate, {singles:.2f}: what the calibration assumes"
    axes.axhline(singles, color="tab:orange", linestyle="--", label=assumed)
    axes.set_xticks(range(len(shapes)), shapes)
    axes.set_xlabel("shape (P parents x N mutations per step), every W")
    axes.set_ylabel("accepted share of proposals")
    axes.set_ylim(0, 0.8)
    axes.set_title("Acceptance by shape in the local study")
    axes.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def main(here: Path) -> None:
    runs = sorted(
        p
        for p in (here / "runs").iterdir()
        if (p / "trace.jsonl").exists() and not fourth_sitting(p.name)
    )
    print("## Acceptance by shape\n")
    acceptance_by_shape(runs)
    acceptance_figure(runs, here / "acceptance.png")
    print("![acceptance by shape](acceptance.png)\n")
    print("## Acceptance by parent, singles against batched\n")
    acceptance_by_parent(runs)
    print("## Rollout latency by candidate\n")
    rollouts_by_candidate(runs)
    print("## Where a 4x4 run's time goes\n")
    stages_of_4x4(here, runs)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
