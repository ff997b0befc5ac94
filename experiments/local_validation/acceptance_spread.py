"""Do the singles' acceptance rates differ from run to run more than the model's runs do?

    .venv/bin/python experiments/local_validation/acceptance_spread.py experiments/local_validation

For a group of single runs, the statistic is Pearson's chi-square of each run's
accepted proposals against the group's pooled rate. Read against a binomial
table it ignores two things the model has: acceptance decays over a run, and
a run that accepts less makes more proposals in the same budget (each
acceptance costs a full validation). So the same statistic is also worked
out on simulated groups: the group's runs simulated with the scenario
calibrated from them (one parameter draw shared by a group, as the runs share
one truth), many times. The share of simulated groups at least as spread out
as the real one is the posterior predictive p; a small p says real runs'
acceptance differs more from run to run than the model's does.

Groups: the eight calibration singles (calibrated.toml) and the fourth
sitting's six singles (calibrated-day.toml).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import chi2
from sittings import calibration_single, fourth_sitting, parts

from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once

GROUPS = (
    ("the eight calibration singles", calibration_single, "calibrated.toml"),
    ("the fourth sitting's six singles", fourth_sitting, "calibrated-day.toml"),
)
SIMULATED_GROUPS = 2000
SINGLE = Shape(1, 1)


def spread(accepted: np.ndarray, proposals: np.ndarray) -> float:
    """Pearson's chi-square of each run's accepted count against the pooled rate."""
    rate = accepted.sum() / proposals.sum()
    expected = proposals * rate
    return float(np.sum((accepted - expected) ** 2 / (expected * (1 - rate))))


def simulated_spreads(scenario: Scenario, workers: list[int]) -> np.ndarray:
    """The statistic over SIMULATED_GROUPS groups of these runs (one W each)."""
    draws = 1 if scenario.uncertainty is None else len(scenario.uncertainty.draws)
    at = {w: scenario.replace(workers=w) for w in set(workers)}
    spreads = np.empty(SIMULATED_GROUPS)
    for group in range(SIMULATED_GROUPS):
        # Replicate group + draws * j runs parameter draw `group mod draws` for every j:
        # one draw per group, each run its own stream.
        runs = [
            simulate_once(at[w], SINGLE, group + draws * SIMULATED_GROUPS * j)
            for j, w in enumerate(workers)
        ]
        accepted = np.array([run.accepted for run in runs], dtype=float)
        proposals = np.array([run.proposals for run in runs], dtype=float)
        spreads[group] = spread(accepted, proposals)
    return spreads


def main(study: Path) -> None:
    print("| singles | runs | accepted of proposals | chi-square | binomial p | simulated p |")
    print("|---|---|---|---|---|---|")
    for label, member, calibrated in GROUPS:
        runs = sorted(
            path
            for path in (study / "runs").iterdir()
            if parts(path.name)[0] == "1x1" and member(path.name)
        )
        results = [json.loads((run / "result.json").read_text(encoding="utf-8")) for run in runs]
        accepted = np.array([r["accepted"] for r in results], dtype=float)
        proposals = np.array([r["proposals"] for r in results], dtype=float)
        observed = spread(accepted, proposals)
        scenario = Scenario.load(study / calibrated)
        simulated = simulated_spreads(scenario, [parts(run.name)[1] for run in runs])
        each = ", ".join(f"{a:.0f}/{n:.0f}" for a, n in zip(accepted, proposals, strict=True))
        print(
            f"| {label} ({calibrated}) | {len(runs)} | {each} | {observed:.1f} on "
            f"{len(runs) - 1} df | {chi2.sf(observed, len(runs) - 1):.2f} "
            f"| {np.mean(simulated >= observed):.2f} |"
        )
    print()
    print(
        f"simulated p: the share of {SIMULATED_GROUPS} simulated groups of the same runs "
        "(the scenario calibrated from them, one parameter draw a group) whose chi-square "
        "is at least the real one"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
