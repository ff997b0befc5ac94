"""The point estimate with the batched runs' own acceptance rate: how much of the
held-out error the acceptance gap alone explains. Not a prediction (it reads the
held-out runs' decisions); `run.sh analyse` validates it beside the others.

    .venv/bin/python experiments/local_validation/counterfactual.py experiments/local_validation

Reads DIR/calibrated-point.toml and the decisions in DIR/runs/*/trace.jsonl of every
batched run of the first three sittings (sittings.py); writes
DIR/calibrated-batched-rate.toml, the same scenario with acceptance a0 at those
runs' pooled per-proposal rate.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from diagnose import accepted_and_judged  # beside this script
from sittings import earlier_batched

from pxn.scenario import Scenario


def batched_rate(runs_dir: Path) -> tuple[int, int]:
    """Accepted and judged proposals of the batched runs, pooled."""
    runs = [trace.parent for trace in sorted(runs_dir.glob("*/trace.jsonl"))]
    counts = [accepted_and_judged(run) for run in runs if earlier_batched(run.name)]
    return sum(a for a, _ in counts), sum(n for _, n in counts)


def main(study: Path) -> None:
    point = Scenario.load(study / "calibrated-point.toml")
    accepted, judged = batched_rate(study / "runs")
    acceptance = dataclasses.replace(point.acceptance, a0=accepted / judged)
    out = study / "calibrated-batched-rate.toml"
    description = "the point estimate, acceptance at the batched runs' rate (a diagnostic)"
    point.replace(acceptance=acceptance, description=description).save(out)
    print(f"acceptance a0 = {accepted}/{judged} = {accepted / judged:.3f} -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
