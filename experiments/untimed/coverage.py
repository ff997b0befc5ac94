"""How often the fit's 95% intervals hold the truth: simulated runs read timed and untimed.

    .venv/bin/python experiments/untimed/coverage.py     # writes coverage.md (a few minutes)

The simulator's runs (a lognormal rollout of known s and scale) are
calibrated twice: as recorded with each rollout timed (the simulator's own
trace), and as an adapter that times nothing would be recorded (each
stage one adapter call whose rollouts span it: tests/calibrate_helpers.py's
untimed_copy). Per setup, RUNS independent single-run calibrations; the
table says how often the 95% bootstrap intervals of the mean, the scale and
s held the truth, and the median estimates. No real gepa here: this is the
estimator alone, on data its model describes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the simulated traces of known truth

from calibrate_helpers import TRUE, untimed_copy, write_traces  # noqa: E402

from pxn.calibrate.traces.pipeline import calibrate_traces  # noqa: E402
from pxn.distribution import Distribution  # noqa: E402
from pxn.shape import Shape  # noqa: E402

ROLLOUT = Distribution("lognorm", params={"s": 0.6, "scale": 2.0})
SETUPS = [(4, "1x1"), (4, "2x2"), (16, "2x2")]
RUNS = 40


def covered(directory: Path, workers: int, shape: str) -> dict[str, list]:
    truth = TRUE.replace(
        budget=300, valset_size=10, trainset_size=30, workers=workers, rollout=ROLLOUT
    )
    found: dict[str, list] = {"timed": [], "untimed": []}
    for r in range(RUNS):
        [run] = write_traces(directory / f"{shape}-w{workers}", truth, Shape.parse(shape), [r])
        copy = untimed_copy(run / "trace.jsonl", directory / f"untimed-{shape}-w{workers}-{r}")
        for reading, path in (("timed", run), ("untimed", copy)):
            cal = calibrate_traces([path], latency="lognorm")
            fit = cal.rollout
            found[reading].append(
                (
                    fit.mean_ci[0] < ROLLOUT.mean() < fit.mean_ci[1],
                    fit.param_ci["scale"][0] < 2.0 < fit.param_ci["scale"][1],
                    fit.param_ci["s"][0] < 0.6 < fit.param_ci["s"][1],
                    cal.scenario.rollout.params["s"],
                    cal.scenario.rollout.mean(),
                    cal.untimed.calls if cal.untimed else fit.n,
                )
            )
    return found


def main() -> None:
    lines = [
        f"# 95% intervals against the truth (lognormal s = 0.6, scale 2.0: mean "
        f"{ROLLOUT.mean():.3f} s), {RUNS} single-run calibrations per row",
        "",
        "| W | shape | reading | fitted on | mean inside | scale inside | s inside | median s "
        "| median mean |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for workers, shape in SETUPS:
            for reading, rows in covered(Path(scratch), workers, shape).items():
                a = np.array(rows, dtype=float)
                what = "calls" if reading == "untimed" else "rollouts"
                lines.append(
                    f"| {workers} | {shape} | {reading} | {np.median(a[:, 5]):.0f} {what} | "
                    f"{a[:, 0].sum():.0f}/{RUNS} | {a[:, 1].sum():.0f}/{RUNS} | "
                    f"{a[:, 2].sum():.0f}/{RUNS} | {np.median(a[:, 3]):.3f} | "
                    f"{np.median(a[:, 4]):.3f} s |"
                )
    text = "\n".join([*lines, ""])
    (Path(__file__).resolve().parent / "coverage.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
