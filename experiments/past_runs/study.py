"""What not recording costs: one run calibrated three ways, held-out shapes predicted.

    .venv/bin/python experiments/past_runs/study.py record ARM    # the real gepa runs
    .venv/bin/python experiments/past_runs/study.py analyse ARM   # calibrate, validate
    .venv/bin/python experiments/past_runs/study.py summarise     # summary.md, every arm

Each arm's runs are real gepa 0.1.4 runs, each at once recorded with the one line (its
trace, runs/NAME/trace.jsonl), left as gepa wrote its run_dir (runs/NAME/gepa/) and
tracked in MLflow (use_mlflow=True, into ARM/mlflow.db, a SQLite store):

- `quality`: the task of known quality (experiments/recorded_quality/quality_run.py's
  user script: a thread-pool adapter and a callable reflection LM that sleep the truth's
  latencies, here at a quarter of `pxn conformance --task quality`'s default workload's,
  so a reflection takes about 2 s as a real one does), gepa.optimize;
- `local`: `pxn run`'s built-in topics task on the local LM pool (SmolLM2-135M, two
  llama.cpp servers), gepa.optimize with pxn's own adapter;
- `dspy`: dspy.GEPA compiling tests/dspy_program.py's one-predictor program on the same
  pool, its log lines (stderr, with their times) kept beside the run.

From the arm's calibration run (a single, seed 0) three scenarios: its run_dir alone with
its total wall-clock given (`--wall-clock`, the trace's, to the second, as a stopwatch
would say it), its run_dir with its MLflow run (`--tracking-uri`: the run's start and
end, and the stages its metric points mark), and its recording (the trace). Each is
validated against every held-out run (`pxn validate`, 200 replicates each): wall-clock
and best-score error and coverage, side by side (summarise.py).

Runs already recorded are kept (delete ARM/runs to redo). The LM arms need the local
pool; run one arm at a time, on a machine as idle as you can get.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent.relative_to(ROOT)
PXN = Path(sys.executable).parent / "pxn"
sys.path[:0] = [str(ROOT / "experiments" / "recorded_quality"), str(ROOT / "tests")]

CALIBRATION = ("1x1", 0)


@dataclasses.dataclass(frozen=True)
class ArmPlan:
    held_out: tuple[tuple[str, int], ...]
    workers: int
    reflection_concurrency: int  # what the run made at once: C for a batched gepa.optimize


ARMS = {
    "quality": ArmPlan((("1x1", 1), ("2x2", 0), ("2x2", 1), ("4x1", 0), ("4x1", 1)), 4, 1),
    "local": ArmPlan((("1x1", 1), ("2x2", 0), ("4x1", 0)), 2, 1),
    "dspy": ArmPlan((("1x1", 1), ("2x2", 0), ("4x1", 0)), 2, 1),
}
MLFLOW_DB = "mlflow.db"


def name(shape: str, seed: int) -> str:
    return f"{shape}-s{seed}"


def folder(arm: str) -> Path:
    return HERE / arm


def tracking_uri(arm: str) -> str:
    return f"sqlite:///{(ROOT / folder(arm) / MLFLOW_DB).resolve()}"


# -- the runs -----------------------------------------------------------------------------


@contextlib.contextmanager
def tracked(arm: str, run: str):
    """gepa.optimize as a user calls it with use_mlflow=True, into the arm's store."""
    import gepa

    plain = gepa.optimize
    gepa.optimize = functools.partial(
        plain,
        use_mlflow=True,
        mlflow_tracking_uri=tracking_uri(arm),
        mlflow_experiment_name=f"past-runs-{arm}",
    )
    try:
        yield
    finally:
        gepa.optimize = plain


def quality_run(out: Path, shape: str, seed: int) -> dict:
    from quality_run import OWN_EXAMPLES, run

    from pxn.calibrate.conformance import DEFAULT_QUALITY_SCENARIO, at_time_scale
    from pxn.shape import Shape

    truth = at_time_scale(DEFAULT_QUALITY_SCENARIO, 0.25)
    study = dataclasses.replace(OWN_EXAMPLES, truth=truth)
    with tracked("quality", out.name):
        return run(out, Shape.parse(shape), seed, study)


def local_run(out: Path, shape: str, seed: int, pool) -> dict:
    from pxn.runner.config import RunConfig
    from pxn.runner.run import run_gepa

    config = RunConfig(out=str(out), task="topics", shape=shape, budget=120, workers=2,
                       seed=seed, progress=False)  # fmt: skip
    with tracked("local", out.name):
        result = run_gepa(config, pool=pool)
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else {}


def dspy_run(out: Path, shape: str, seed: int, task_base: str, reflection_base: str) -> dict:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "MLFLOW_TRACKING_URI": tracking_uri("dspy")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(ROOT / HERE / "dspy_run.py"), str(out), task_base, reflection_base,
         "--shape", shape, "--seed", str(seed)],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    out.with_suffix(".log").write_text(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def record(arm: str) -> None:
    plan = ARMS[arm]
    runs = folder(arm) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    cells = [CALIBRATION, *plan.held_out]
    pending = [c for c in cells if not (runs / f"{name(*c)}.json").exists()]
    with contextlib.ExitStack() as stack:
        pool = None
        if arm in ("local", "dspy") and pending:
            from pxn.runner.lm_pool import LMPool

            pool = stack.enter_context(LMPool(2))
        for shape, seed in pending:
            out = runs / name(shape, seed)
            if arm == "quality":
                totals = quality_run(out, shape, seed)
            elif arm == "local":
                totals = local_run(out, shape, seed, pool.info)
            else:
                task, reflection = (s.api_base for s in pool.servers[:2])
                totals = dspy_run(out, shape, seed, task, reflection)
            (runs / f"{name(shape, seed)}.json").write_text(json.dumps(totals, default=str) + "\n")
            print(f"{arm} {name(shape, seed)} done", flush=True)


# -- the three calibrations and their validations ----------------------------------------


def pxn(output: Path, *args: str | Path) -> None:
    """A pxn command from the repository root, its output kept; it must succeed."""
    done = subprocess.run([str(PXN), *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    output.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"pxn {args[0]} ended {done.returncode}: see {output}")


def wall_clock(run: Path) -> str:
    from pxn.trace import read_one, summarize

    return f"{round(summarize(read_one(run)).wall_clock)}s"


WAYS = ("run_dir", "run_dir-mlflow", "recorded")


def analyse(arm: str) -> None:
    plan = ARMS[arm]
    here = folder(arm)
    calibration = here / "runs" / name(*CALIBRATION)
    setup = ["--workers", str(plan.workers), "--draws", "100"]
    if plan.reflection_concurrency != 1:
        setup += ["--reflection-concurrency", str(plan.reflection_concurrency)]
    past = calibration / "gepa"
    log = calibration.with_suffix(".log")
    ways = {
        "run_dir": ["calibrate", past, *setup, "--wall-clock", wall_clock(calibration)],
        "run_dir-mlflow": ["calibrate", past, *setup, "--tracking-uri", tracking_uri(arm)],
        "recorded": ["calibrate", calibration, "--draws", "100"],
    }
    if arm == "dspy" and log.exists():
        ways["run_dir-log"] = ["calibrate", past, *setup, "--log", log]
    held_out = [here / "runs" / name(*cell) for cell in plan.held_out]
    for way, args in ways.items():
        scenario = here / f"{way}.toml"
        pxn(here / f"calibrate-{way}.txt", *args, "-o", scenario)
        pxn(here / f"validation-{way}.txt", "validate", "--scenario", scenario, *held_out,
            "--reps", "200", "--out", here / f"validation-{way}")  # fmt: skip


def summarise() -> None:
    subprocess.run([sys.executable, str(ROOT / HERE / "summarise.py")], check=True, cwd=ROOT)


if __name__ == "__main__":
    os.chdir(ROOT)
    step, *rest = sys.argv[1:] or [""]
    if step == "summarise" and not rest:
        summarise()
    elif step in ("record", "analyse") and len(rest) == 1 and rest[0] in ARMS:
        (record if step == "record" else analyse)(rest[0])
    else:
        print(f"usage: study.py record|analyse {'|'.join(ARMS)} | summarise", file=sys.stderr)
        raise SystemExit(2)
