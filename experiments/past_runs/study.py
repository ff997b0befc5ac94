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
- `quality-state`: the same runs with `track_best_outputs=False`, so that gepa's state
  keeps no adapter outputs and pxn reads it (see below): the run_dir ways then calibrate
  the search from every candidate's validation scores, and predict the best score;
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

Runs already recorded are kept (delete ARM/runs and ARM/mlflow.db to redo). Every run
holds the machine's lock (an exclusive flock on /tmp/lm.lock, one run at a time, so other
timing-sensitive work waits for it and it for them): the quality arm sleeps known latencies,
which a busy machine wakes late, and the LM arms start the local pool inside the lock, one
pool per run, so it serves that run alone. MLflow's artifacts go under ARM/mlflow-artifacts
(the experiment is made with that location before the first run), not ./mlruns.

Where pxn refuses a run_dir's gepa_state.bin (gepa.optimize keeps the adapter's outputs in
it by default, track_best_outputs=True, and the quality arm's outputs are its own Example
objects, a class no gepa state names), it leaves the state unread and reads the
validation scores off gepa's log lines in run_log.txt: every new program's per example,
the seed's mean alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import time
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


# The LM arms' second three held-out runs were recorded after the first three's misses
# were read (README: "A second sitting"), to test what was changed for them; the third
# three after the changes the second sitting's misses led to were committed ("A third
# sitting"), to test those on runs no change had seen.
LM_HELD_OUT = (
    ("1x1", 1), ("2x2", 0), ("4x1", 0),
    ("1x1", 2), ("2x2", 1), ("4x1", 1),
    ("1x1", 3), ("2x2", 2), ("4x1", 2),
    ("1x1", 4), ("2x2", 3), ("4x1", 3),
)  # fmt: skip
ARMS = {
    "quality": ArmPlan((("1x1", 1), ("2x2", 0), ("2x2", 1), ("4x1", 0), ("4x1", 1)), 4, 1),
    "quality-state": ArmPlan((("1x1", 1), ("2x2", 0), ("2x2", 1), ("4x1", 0), ("4x1", 1)), 4, 1),
    "local": ArmPlan(LM_HELD_OUT, 2, 1),
    "dspy": ArmPlan(LM_HELD_OUT, 2, 1),
}
MLFLOW_DB = "mlflow.db"
LOCK = Path("/tmp/lm.lock")


def name(shape: str, seed: int) -> str:
    return f"{shape}-s{seed}"


def folder(arm: str) -> Path:
    return HERE / arm


def tracking_uri(arm: str) -> str:
    return f"sqlite:///{(ROOT / folder(arm) / MLFLOW_DB).resolve()}"


def experiment(arm: str) -> str:
    return f"past-runs-{arm}"


def make_store(arm: str) -> None:
    """The arm's SQLite store and experiment, its artifacts under the arm's folder (MLflow's
    default, ./mlruns, would land in the checkout)."""
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    client = mlflow.MlflowClient(tracking_uri=tracking_uri(arm))
    if client.get_experiment_by_name(experiment(arm)) is None:
        artifacts = (ROOT / folder(arm) / "mlflow-artifacts").resolve()
        client.create_experiment(experiment(arm), artifact_location=artifacts.as_uri())


@contextlib.contextmanager
def machine_lock(what: str):
    """The machine's lock, held for one run: timing-sensitive work runs one at a time."""
    with LOCK.open("a") as handle:
        waited = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_EX)
        print(f"{what}: lock held after {time.monotonic() - waited:.0f} s", flush=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- the runs -----------------------------------------------------------------------------


@contextlib.contextmanager
def tracked(arm: str, **settings):
    """gepa.optimize as a user calls it with use_mlflow=True, into the arm's store, and any
    other `settings` the arm's user gives it."""
    import gepa

    plain = gepa.optimize
    gepa.optimize = functools.partial(
        plain,
        use_mlflow=True,
        mlflow_tracking_uri=tracking_uri(arm),
        mlflow_experiment_name=experiment(arm),
        **settings,
    )
    try:
        yield
    finally:
        gepa.optimize = plain


def quality_run(arm: str, out: Path, shape: str, seed: int) -> dict:
    from quality_run import OWN_EXAMPLES, run

    from pxn.checks.conformance import DEFAULT_QUALITY_SCENARIO, at_time_scale
    from pxn.shape import Shape

    truth = at_time_scale(DEFAULT_QUALITY_SCENARIO, 0.25)
    study = dataclasses.replace(OWN_EXAMPLES, truth=truth)
    settings = {"track_best_outputs": False} if arm == "quality-state" else {}
    with tracked(arm, **settings):
        return run(out, Shape.parse(shape), seed, study)


def local_run(out: Path, shape: str, seed: int, pool) -> dict:
    from pxn.runner.config import RunConfig
    from pxn.runner.run import run_gepa

    config = RunConfig(out=str(out), task="topics", shape=shape, budget=120, workers=2,
                       seed=seed, progress=False)  # fmt: skip
    with tracked("local"):
        result = run_gepa(config, pool=pool)
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else {}


def dspy_run(out: Path, shape: str, seed: int, task_base: str, reflection_base: str) -> dict:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true",
           "MLFLOW_TRACKING_URI": tracking_uri("dspy")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(ROOT / HERE / "dspy_run.py"), str(out), task_base, reflection_base,
         "--shape", shape, "--seed", str(seed), "--tracking-uri", tracking_uri("dspy"),
         "--experiment", experiment("dspy")],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    out.with_suffix(".log").write_text(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def record(arm: str) -> None:
    plan = ARMS[arm]
    runs = folder(arm) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    make_store(arm)
    cells = [CALIBRATION, *plan.held_out]
    for shape, seed in [c for c in cells if not (runs / f"{name(*c)}.json").exists()]:
        out = runs / name(shape, seed)
        if out.exists():  # a run cut short: its files would be read as this run's
            shutil.rmtree(out)
        with machine_lock(f"{arm} {name(shape, seed)}"):
            if arm.startswith("quality"):
                totals = quality_run(arm, out, shape, seed)
            else:
                from pxn.runner.lm_pool import LMPool

                with LMPool(2) as pool:  # a PoolInfo: the servers' addresses
                    if arm == "local":
                        totals = local_run(out, shape, seed, pool)
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
    from pxn.run_summary import summarize
    from pxn.trace_reading import read_one

    return f"{round(summarize(read_one(run)).wall_clock)}s"


WAYS = ("run_dir", "run_dir-mlflow", "recorded")
MLFLOW_RUN = "mlflow-run.json"  # the calibration run's MLflow record: committed, not the store


def export_mlflow(arm: str, run_dir: Path) -> None:
    """The MLflow run tracked with `run_dir` as JSON: its start, end, status, params and every
    metric point with its step and time (what pxn reads), so the store can be rebuilt."""
    from mlflow import MlflowClient

    from pxn.calibrate.past_runs.mlflow_run import find_tracked_run

    client = MlflowClient(tracking_uri=tracking_uri(arm))
    run = client.get_run(find_tracked_run(run_dir, tracking_uri(arm)))
    run_id = run.info.run_id
    history = {
        key: [[m.step, m.value, m.timestamp] for m in client.get_metric_history(run_id, key)]
        for key in sorted(run.data.metrics)
    }
    record = {"run_id": run.info.run_id, "start_time": run.info.start_time,
              "end_time": run.info.end_time, "status": run.info.status,
              "params": dict(sorted(run.data.params.items())), "metrics": history}  # fmt: skip
    (folder(arm) / MLFLOW_RUN).write_text(json.dumps(record, indent=1) + "\n")


def restore_mlflow(arm: str) -> None:
    """ARM/mlflow.db rebuilt from ARM/mlflow-run.json (a fresh clone has the JSON only): one
    run, its params, its metric points at their own times, its start and end."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    record = json.loads((folder(arm) / MLFLOW_RUN).read_text())
    make_store(arm)
    client = MlflowClient(tracking_uri=tracking_uri(arm))
    found = client.get_experiment_by_name(experiment(arm))
    run = client.create_run(found.experiment_id, start_time=record["start_time"])
    params = [Param(k, v) for k, v in record["params"].items()]
    metrics = [
        Metric(key, value, timestamp, step)
        for key, points in record["metrics"].items()
        for step, value, timestamp in points
    ]
    for at in range(0, max(len(params), len(metrics)), 100):
        client.log_batch(run.info.run_id, metrics=metrics[at : at + 100],
                         params=params[at : at + 100])  # fmt: skip
    client.set_terminated(run.info.run_id, record["status"], end_time=record["end_time"])


def analyse(arm: str) -> None:
    plan = ARMS[arm]
    here = folder(arm)
    calibration = here / "runs" / name(*CALIBRATION)
    setup = ["--workers", str(plan.workers), "--draws", "100"]
    if plan.reflection_concurrency != 1:
        setup += ["--reflection-concurrency", str(plan.reflection_concurrency)]
    if not (folder(arm) / MLFLOW_DB).exists():
        restore_mlflow(arm)
    elif not (folder(arm) / MLFLOW_RUN).exists():
        export_mlflow(arm, ROOT / calibration / "gepa")
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
