"""The messy-run study: real dspy.GEPA runs of a two-predictor program, recorded as a user
records them, calibrated from singles, predicted for batched shapes and held-out runs.

    .venv/bin/python experiments/messy_runs/run.py record [tuning|held-out]
    .venv/bin/python experiments/messy_runs/run.py analyse

`record` starts the local pool (2 llama.cpp servers, SmolLM2-135M: one the task LM, one the
reflection LM) and runs program.py once per planned run, each into runs/NAME/ with its
totals in runs/NAME.json; runs already recorded are kept. The tuning runs are what the
model was tuned against; the held-out runs were recorded at the same sitting and read only
once the code was frozen (README.md). `analyse` calibrates from the tuning singles and
validates the tuning runs, then the held-out runs, against the scenario (study.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "program.py"
# name: (shape, seed)
TUNING = {
    "single-1": ("single", 1),
    "single-2": ("single", 2),
    "single-3": ("single", 3),
    "2x2-1": ("2x2", 1),
    "4x1-1": ("4x1", 1),
}
HELD_OUT = {
    "single-4": ("single", 4),
    "single-5": ("single", 5),
    "single-6": ("single", 6),
    "2x2-2": ("2x2", 2),
    "2x2-3": ("2x2", 3),
    "4x1-2": ("4x1", 2),
    "4x1-3": ("4x1", 3),
}
# The second program (guess-check), fewer runs of a smaller budget: its chain of thought
# makes a rollout several times longer. name: (shape, seed).
CHECK_TUNING = {"check-single-1": ("single", 1), "check-single-2": ("single", 2),
                "check-2x2-1": ("2x2", 1)}  # fmt: skip
CHECK_HELD_OUT = {"check-single-3": ("single", 3), "check-2x2-2": ("2x2", 2),
                  "check-4x1-1": ("4x1", 1)}  # fmt: skip
BUDGETS = {"keyword-topic": 80, "guess-check": 50}
PLANS = {
    "tuning": TUNING,
    "held-out": HELD_OUT,
    "check-tuning": CHECK_TUNING,
    "check-held-out": CHECK_HELD_OUT,
}


def record(plan: dict[str, tuple[str, int]]) -> None:
    from pxn.runner.lm_pool import LMPool

    runs = HERE / "runs"
    with LMPool(2) as pool:
        task, reflection = (server.api_base for server in pool.servers[:2])
        for name, (shape, seed) in plan.items():
            if (runs / f"{name}.json").exists():
                continue
            started = time.time()
            program = "guess-check" if name.startswith("check-") else "keyword-topic"
            load = os.getloadavg()[0]
            done = subprocess.run(
                [sys.executable, str(PROGRAM), str(runs / name), task, reflection,
                 "--shape", shape, "--seed", str(seed), "--program", program,
                 "--budget", str(BUDGETS[program])],
                capture_output=True, text=True, check=True,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            )  # fmt: skip
            (runs / f"{name}.log").write_text(done.stderr)
            totals = done.stdout.strip().splitlines()[-1]  # after DSPy's progress bars
            (runs / f"{name}.json").write_text(totals + "\n")
            took = time.time() - started
            with (HERE / "measure.log").open("a") as log:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started))
                log.write(f"{name}: started {when} UTC, load {load:.2f}, took {took:.0f} s\n")
            print(f"{name}: {took:.0f} s {totals}", flush=True)


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else ""
    if step == "record":
        which = sys.argv[2:] or list(PLANS)
        for name in which:
            record(PLANS[name])
    elif step == "analyse":
        from study import analyse

        for name in sys.argv[2:] or list(PLANS):
            analyse(name, PLANS[name])
    else:
        raise SystemExit("usage: run.py record [tuning|held-out] | run.py analyse [...]")
