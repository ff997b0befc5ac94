"""Were the check's runs made in the conditions of the runs it was calibrated from?

    .venv/bin/python experiments/advise_check/conditions.py experiments/advise_check

For each run of the calibration and of the check, in the order they were
made: its b, when it started, its mean rollout and reflection latency and its
reflections' mean input tokens; and, for each b, the mean reflection latency
the calibrated scenario gives there (its reflection latency at the measured
b, shifted by the seconds-per-input-token fit). A calibration run and a
check run at the same b and W ran the same calls: where their latencies
differ, the machine's conditions differed, whatever the model does with b.
Only singles compare reflection by reflection: a batched run's reflections
are sent at once, and the latency recorded includes waiting for, or sharing,
one of the 2 servers.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from pxn.scenario import Scenario
from pxn.trace import Reflection, Rollout
from pxn.trace_reading import read_trace

STUDY = Path("experiments/local_validation/runs")
CALIBRATION = ["1x1-w1-s0", "1x1-w1-s1", "1x1-w2-s0", "1x1-w2-s1"]  # as run.sh calibrates


def main() -> None:
    here = Path(sys.argv[1])
    runs = [STUDY / name for name in CALIBRATION] + sorted(
        path for path in (here / "runs").iterdir() if (path / "trace.jsonl").exists()
    )
    rows = []
    for run in runs:
        trace = read_trace(run / "trace.jsonl")
        start = trace.run_start
        rollouts = [e.end - e.start for e in trace.live(Rollout)]
        reflections = trace.live(Reflection)
        rows.append(
            (
                start.started_at or "",
                "calibration" if run.parent == STUDY or run.name.startswith("cal-") else "check",
                f"{run.parent.parent.name}/{run.name}",
                start.minibatch,
                start.workers,
                statistics.fmean(rollouts),
                statistics.fmean(e.end - e.start for e in reflections),
                statistics.fmean(e.tokens_in or 0 for e in reflections),
            )
        )
    print(
        "| started (UTC) | role | run | b | W | rollout mean | reflection mean "
        "| reflection tokens in |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for started, role, name, b, w, rollout, reflection, tokens in sorted(rows):
        print(
            f"| {started[:16].replace('T', ' ')} | {role} | {name} | {b} | {w} "
            f"| {rollout:.3f} s | {reflection:.3f} s | {tokens:.0f} |"
        )
    print()
    print(
        "A batched run sends a step's reflections at once to the 2 servers, so a "
        "reflection's latency there includes waiting for, or sharing, a server."
    )
    scenario = Scenario.load(here / "scenario.toml")
    tokens = scenario.tokens
    assert tokens is not None
    base = scenario.reflection.mean()
    print()
    print(
        f"The scenario's mean reflection (measured at b = {tokens.measured_minibatch}, "
        f"{tokens.reflection_seconds_per_input_token * 1000:.1f} ms per input token): "
        + ", ".join(
            f"b = {b}: {base + tokens.reflection_latency_shift(b):.3f} s" for b in range(1, 5)
        )
    )


if __name__ == "__main__":
    main()
