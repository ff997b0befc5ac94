"""Does a plain thread-pool adapter, recorded with the one line, predict as a timed one does?

    .venv/bin/python experiments/untimed/study.py record    # the real gepa runs (kept ones kept)
    .venv/bin/python experiments/untimed/study.py analyse   # calibrate, validate, summarise

`record` runs synthetic_run.py's user script in this process, cell after
cell (replicates outermost, so a slow spell of the shared machine falls on
every shape, W and variant alike), each into runs/VARIANT/SHAPE-wW-sSEED/
with its totals beside it (SHAPE-wW-sSEED.json) and a line in measure.log
(UTC time, the machine's load). VARIANT is `timed` (each rollout in
rec.rollout) or `untimed` (the plain adapter). gepa's own state directory is
removed after each run (only the trace is studied).

`analyse` calibrates, per variant and W, a scenario from the two singles
(seeds 0 and 1) and validates it against the held-out shapes at that W (200
replicates each), with pxn's own commands; a third reading, `untimed-v1`,
is the untimed traces read as version-1 traces were (their `timed` field
dropped: every span taken for a latency, as pxn calibrated them before).
summary.md then holds each reading's error and coverage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent.relative_to(ROOT)  # paths as the reports show them
PXN = Path(sys.executable).parent / "pxn"
WORKERS = (4, 16)
CALIBRATION = [("1x1", seed) for seed in (0, 1)]
HELD_OUT_SHAPES = ("2x1", "1x2", "2x2", "4x1", "2x4", "8x2")
HELD_OUT_SEEDS = (0, 1, 2, 3)
VARIANTS = ("timed", "untimed")


def cells() -> list[tuple[str, str, int, int]]:
    """(variant, shape, W, seed), replicates outermost."""
    runs = [(shape, seed) for shape, seed in CALIBRATION]
    runs += [(shape, seed) for seed in HELD_OUT_SEEDS for shape in HELD_OUT_SHAPES]
    runs.sort(key=lambda run: run[1])
    return [(v, shape, w, seed) for shape, seed in runs for w in WORKERS for v in VARIANTS]


def name(shape: str, workers: int, seed: int) -> str:
    return f"{shape}-w{workers}-s{seed}"


def record() -> None:
    sys.path.insert(0, str(HERE))
    from synthetic_run import run

    from pxn.shape import Shape

    for variant, shape, workers, seed in cells():
        out = HERE / "runs" / variant / name(shape, workers, seed)
        totals = out.with_suffix(".json")
        if totals.exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        with (HERE / "measure.log").open("a") as log:
            log.write(f"{utc_now()} {out} load: {load}\n")
        result = run(out, Shape.parse(shape), workers, seed, variant == "timed")
        shutil.rmtree(out / "gepa")
        totals.write_text(json.dumps(result) + "\n")


def utc_now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pxn(output: Path, *args: str | Path) -> None:
    """A pxn command from the repository root, its output kept in `output`."""
    done = subprocess.run(
        [str(PXN), *map(str, args)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(done.stdout + done.stderr)


def as_version_1(source: Path, target: Path) -> None:
    """The runs with every rollout's `timed` dropped, as a version-1 trace reads."""
    for run in sorted(source.iterdir()):
        if not run.is_dir():
            continue
        events = [json.loads(line) for line in (run / "trace.jsonl").read_text().splitlines()]
        for event in events:
            event.pop("timed", None)
        (target / run.name).mkdir(parents=True)
        (target / run.name / "trace.jsonl").write_text("\n".join(map(json.dumps, events)) + "\n")


def analyse() -> None:
    readings = {v: HERE / "runs" / v for v in VARIANTS}
    readings["untimed-v1"] = HERE / "runs-v1"  # made from runs/untimed here, then removed
    shutil.rmtree(readings["untimed-v1"], ignore_errors=True)
    as_version_1(readings["untimed"], readings["untimed-v1"])
    try:
        for reading, runs in readings.items():
            for w in WORKERS:
                calibrate_and_validate(f"{reading}-w{w}", runs, w)
    finally:
        shutil.rmtree(readings["untimed-v1"])
    subprocess.run([sys.executable, str(HERE / "summarise.py")], check=True)


def calibrate_and_validate(label: str, runs: Path, workers: int) -> None:
    scenario = HERE / "calibrated" / f"{label}.toml"
    singles = [runs / name(shape, workers, seed) for shape, seed in CALIBRATION]
    pxn(HERE / "calibrate" / f"{label}.txt", "calibrate", *singles, "-o", scenario)
    held_out = [
        runs / name(shape, workers, seed) for shape in HELD_OUT_SHAPES for seed in HELD_OUT_SEEDS
    ]
    pxn(
        HERE / "validation" / f"{label}.txt",
        "validate", "--scenario", scenario, *held_out,
        "--reps", "200", "--out", HERE / "validation" / label,
    )  # fmt: skip


if __name__ == "__main__":
    os.chdir(ROOT)
    step = sys.argv[1] if len(sys.argv) > 1 else ""
    if step not in ("record", "analyse"):
        raise SystemExit("usage: study.py record|analyse")
    record() if step == "record" else analyse()
