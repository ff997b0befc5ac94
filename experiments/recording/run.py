"""The README's "Record your own run" round trip, on the local LM pool.

    .venv/bin/python experiments/recording/run.py            # record, then analyse
    .venv/bin/python experiments/recording/run.py analyse    # only calibrate, sweep, validate

`record` starts the local pool (2 llama.cpp servers, SmolLM2-135M) and runs a
user's dspy.GEPA script with its one recording line, tests/dspy_program.py (a
dspy.Predict labelling a sentence's topic; 12 training and 4 validation
examples, num_threads=4, max_metric_calls=120, DSPy's other defaults, merge
on among them), twice: as a single run and at 2x2. Each run's totals
(pxn.runner.record.RecordedRun) go to runs/NAME.json.
`analyse` calibrates a scenario from the single run only, sweeps it, and
validates it against the 2x2 run it never saw; every command's output is
kept beside it (calibrate.txt, sweep.txt, validation.txt). Runs already
recorded are kept (delete runs/ to redo).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PXN = Path(sys.executable).parent / "pxn"
PROGRAM = ROOT / "tests" / "dspy_program.py"
RUNS = {"single": "single", "2x2": "2x2"}  # run name: shape
SETTINGS = ["--budget", "120", "--train", "12", "--threads", "4"]


def record() -> None:
    from pxn.runner.lm_pool import LMPool

    with LMPool(2) as pool:
        task, reflection = (server.api_base for server in pool.servers[:2])
        for name, shape in RUNS.items():
            out = HERE / "runs" / name
            if (HERE / "runs" / f"{name}.json").exists():
                continue
            done = subprocess.run(
                [sys.executable, str(PROGRAM), str(out), task, reflection, *SETTINGS,
                 "--shape", shape],
                capture_output=True, text=True, check=True,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            )  # fmt: skip
            totals = done.stdout.strip().splitlines()[-1]  # after DSPy's progress bars
            (HERE / "runs" / f"{name}.json").write_text(totals + "\n")
            print(f"{name}: {totals}")


def pxn(output: str, *args: str) -> None:
    """Run a pxn command from the repository root, its output shown and kept."""
    done = subprocess.run([str(PXN), *args], cwd=ROOT, capture_output=True, text=True, check=True)
    (HERE / output).write_text(done.stdout + done.stderr)
    print(done.stdout + done.stderr)


def analyse() -> None:
    here = HERE.relative_to(ROOT)
    scenario = str(here / "single.toml")
    pxn("calibrate.txt", "calibrate", str(here / "runs" / "single"), "-o", scenario)
    pxn("sweep.txt", "sweep", scenario, "--shapes", "single,2x2,4x1", "--reps", "200",
        "--seed", "0")  # fmt: skip
    pxn("validation.txt", "validate", "--scenario", scenario, str(here / "runs" / "2x2"),
        "--out", str(here / "validation"))  # fmt: skip


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else "all"
    if step not in ("record", "analyse", "all"):
        raise SystemExit("usage: run.py [record|analyse|all]")
    if step in ("record", "all"):
        record()
    if step in ("analyse", "all"):
        analyse()
