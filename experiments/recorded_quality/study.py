"""Recorded with the one line, calibrated from singles: are batched shapes' best scores right?

    .venv/bin/python experiments/recorded_quality/study.py record    # the real gepa runs
    .venv/bin/python experiments/recorded_quality/study.py analyse   # calibrate, validate

`record` runs quality_run.py's user script in this process, run after run (replicates
outermost, so a slow spell of the shared machine falls on every shape alike), each into
runs/SHAPE-sSEED/ with its totals beside it (SHAPE-sSEED.json) and a line in measure.log
(UTC time, the machine's load). Runs already recorded are kept. gepa's own state
directory is removed after each run: calibration and validation read the trace only.

`analyse` calibrates a scenario from the eight calibration singles (seeds 0-7) with the
quality model (`pxn calibrate --search quality`, calibrate.txt, calibrated.toml), builds the
same scenario with the true [quality] in place of the inferred one
(calibrated-true-quality.toml), and validates both against every held-out run (singles of
seeds 8-11, and the batched shapes; 200 replicates each), with pxn's own commands
(validation*.txt and validation*/); summarise.py then writes summary.md.

With `--same-examples`, either step is the second arm's (quality_run.py's option: one set
of examples, noiseless evaluations), in same-examples/ with the same layout. The true
[quality] carries the seed's validation where the calibration singles all measured it
alike (as `pxn calibrate` keeps it), so its predictions start from the seed as measured.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from quality_run import Arm, arm, run

from pxn.calibrate.traces.quality import seed_validation
from pxn.quality import Quality
from pxn.scenario import Scenario, Uncertainty
from pxn.shape import Shape
from pxn.trace_reading import read_one

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent.relative_to(ROOT)  # paths as the reports show them
PXN = Path(sys.executable).parent / "pxn"
CALIBRATION = [("1x1", seed) for seed in range(8)]
HELD_OUT = [("1x1", seed) for seed in range(8, 12)] + [
    (shape, seed) for shape in ("2x2", "4x1", "1x4", "4x4") for seed in range(6)
]
SEARCH_MODELS = ("quality.", "acceptance.")  # parameters of how proposals fare


def name(shape: str, seed: int) -> str:
    return f"{shape}-s{seed}"


def cells() -> list[tuple[str, int]]:
    """(shape, seed), replicates outermost (by seed, then the list's order)."""
    runs = CALIBRATION + HELD_OUT
    return sorted(runs, key=lambda cell: cell[1])


def record(study: Arm) -> None:
    folder = HERE / study.folder
    for shape, seed in cells():
        out = folder / "runs" / name(shape, seed)
        totals = out.with_suffix(".json")
        if totals.exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with (folder / "measure.log").open("a") as log:
            log.write(f"{stamp} {out} load: {load}\n")
        result = run(out, Shape.parse(shape), seed, study)
        shutil.rmtree(out / "gepa")
        totals.write_text(json.dumps(result) + "\n")


def pxn(output: Path, *args: str | Path) -> None:
    """A pxn command from the repository root, its output kept in `output`; it must succeed."""
    done = subprocess.run([str(PXN), *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    output.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"pxn {args[0]} ended {done.returncode}: see {output}")


def analyse(study: Arm) -> None:
    """Calibrate, validate and summarise."""
    folder = HERE / study.folder
    scenario = folder / "calibrated.toml"
    singles = [folder / "runs" / name(shape, seed) for shape, seed in CALIBRATION]
    pxn(folder / "calibrate.txt", "calibrate", *singles, "-o", scenario, "--search", "quality")
    oracle = folder / "calibrated-true-quality.toml"
    measured = seed_validation([read_one(run / "trace.jsonl") for run in singles])
    with_true_quality(scenario, dataclasses.replace(study.truth.quality, seed_validation=measured),
                      oracle)  # fmt: skip
    held_out = [folder / "runs" / name(shape, seed) for shape, seed in HELD_OUT]
    for label, predictor in [("validation", scenario), ("validation-true-quality", oracle)]:
        pxn(
            folder / f"{label}.txt",
            "validate", "--scenario", predictor, *held_out,
            "--reps", "200", "--out", folder / label,
        )  # fmt: skip
    options = ["--same-examples"] if study.same_examples else []
    subprocess.run([sys.executable, str(HERE / "summarise.py"), *options], check=True)


def with_true_quality(calibrated: Path, truth: Quality, out: Path) -> None:
    """The calibrated scenario with `truth`, the [quality] the task was drawn from (with
    the seed's validation as the singles measured it alike, if they did), in place of its
    search model (its draws of the latencies kept): what the runs' spread alone allows."""
    scenario = Scenario.load(calibrated)
    assert scenario.uncertainty is not None
    draws = tuple(
        {path: value for path, value in draw.items() if not path.startswith(SEARCH_MODELS)}
        for draw in scenario.uncertainty.draws
    )
    source = f"{scenario.uncertainty.source}; [quality] held at the truth"
    scenario.replace(
        name="calibrated-true-quality",
        acceptance=None,
        quality=truth,
        uncertainty=Uncertainty(source, draws),
    ).save(out)


if __name__ == "__main__":
    os.chdir(ROOT)
    step, *options = sys.argv[1:] or [""]
    if step not in ("record", "analyse") or options not in ([], ["--same-examples"]):
        print("usage: study.py record|analyse [--same-examples]", file=sys.stderr)
        raise SystemExit(2)
    study = arm(bool(options))
    record(study) if step == "record" else analyse(study)
