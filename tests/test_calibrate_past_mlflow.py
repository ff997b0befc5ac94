"""A past run's MLflow record as a source: a real gepa 0.1.4 run tracked with use_mlflow=True
into a real local SQLite store the test creates, read back for its times; a run that is no
GEPA run is one line. Slow: creating an MLflow store runs its schema migrations."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gepa
import pytest
from conftest import assert_user_error, run_pxn
from record_helpers import SEED, TRAIN, VAL, CallableLM, ThreadedAdapter

from pxn.calibrate.past_runs.mlflow_run import find_tracked_run, read_mlflow_run
from pxn.calibrate.past_runs.past_run import past_run
from pxn.calibrate.past_runs.run_dir import read_run_dir
from pxn.calibrate.past_runs.stage_times import (
    fit_reflection_latency,
    fit_stage_latency,
    mlflow_stage_spans,
)

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> tuple[Path, str, str]:
    """(run_dir, tracking URI, run id) of a real gepa run tracked in a fresh SQLite store."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    run_dir = root / "run_dir"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        in_store(uri, "past-runs", root)
        tracked_run(str(run_dir), uri, "past-runs", 80)
        found = find_tracked_run(run_dir, uri)
    assert found is not None
    return run_dir, uri, found


def tracked_run(run_dir: str, uri: str, experiment: str, budget: int) -> None:
    """A real gepa run of the recorder tests' task, into `run_dir`, tracked in MLflow."""
    gepa.optimize(
        seed_candidate=SEED,
        trainset=TRAIN,
        valset=VAL,
        adapter=ThreadedAdapter(2),
        reflection_lm=CallableLM(),
        max_metric_calls=budget,
        run_dir=run_dir,
        use_mlflow=True,
        mlflow_tracking_uri=uri,
        mlflow_experiment_name=experiment,
    )


def in_store(uri: str, experiment: str, root: Path) -> None:
    """Make `experiment` of the store at `uri` MLflow's current one, its artifacts under
    `root` (by default MLflow writes them to ./mlruns, inside the checkout)."""
    mlflow.set_tracking_uri(uri)
    mlflow.create_experiment(experiment, artifact_location=(root / "artifacts").as_uri())
    mlflow.set_experiment(experiment)


def test_the_metrics_gepa_logged_mark_the_run_and_its_stages(tracked):
    run_dir, uri, run_id = tracked
    record = read_mlflow_run(f"mlflow:{run_id}", uri)
    assert record.run_dir == str(run_dir) and record.status == "FINISHED"
    assert record.end is not None and record.start <= record.last_time <= record.end
    latest = read_mlflow_run("mlflow:experiment:past-runs", uri)
    assert latest.run_id == run_id
    run = past_run(read_run_dir(run_dir))
    spans = mlflow_stage_spans(run, record).rollouts
    # The seed's validation, every iteration's parents, and each full validation.
    full_vals = sum(1 for r in run.iterations if r.new_programs)
    assert len(spans) == 1 + len(run.iterations) + full_vals
    assert all(s.span > 0 for s in spans)
    # Each span names whose rollouts it holds: the seed's, the parents', the new programs'.
    assert spans[0].phase == "seed_val" and spans[0].candidates == (0,)
    parents = {r.number: {t.parent for t in r.tasks} for r in run.iterations}
    programs = {r.number: r.new_programs for r in run.iterations}
    for span in spans[1:]:
        expected = parents if span.phase == "parent_minibatch" else programs
        assert set(span.candidates) == set(expected[span.iteration]), span
    assert fit_stage_latency(spans, 2, "MLflow") is not None


REFLECTION_S = 0.5  # the slow run's reflections and rollouts, as sleeps
ROLLOUT_S = 0.25


class SlowAdapter(ThreadedAdapter):
    def _run(self, candidate: dict[str, str], example: str) -> float:
        time.sleep(ROLLOUT_S)
        return super()._run(candidate, example)


class SlowLM(CallableLM):
    def __call__(self, prompt: Any) -> str:
        time.sleep(REFLECTION_S)
        return super().__call__(prompt)


def test_mlflow_times_each_reflection_less_its_childs_minibatch(tmp_path, monkeypatch):
    """A single task's span from its parent's selection to its child's minibatch score holds
    the reflection and the child's b = 3 rollouts on W = 2 (two rollouts' time): the
    reflection measured is the span less that, not the span."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    in_store(uri, "slow", tmp_path)
    run_dir = tmp_path / "run_dir"
    gepa.optimize(
        seed_candidate=SEED, trainset=TRAIN, valset=VAL, adapter=SlowAdapter(2),
        reflection_lm=SlowLM(), max_metric_calls=90, run_dir=str(run_dir), use_mlflow=True,
        mlflow_tracking_uri=uri, mlflow_experiment_name="slow",
    )  # fmt: skip
    run = past_run(read_run_dir(run_dir))
    found = find_tracked_run(run_dir, uri)
    assert found is not None
    marked = mlflow_stage_spans(run, read_mlflow_run(f"mlflow:{found}", uri))
    child = 2 * ROLLOUT_S
    assert all(p.span >= REFLECTION_S + child for p in marked.proposals)
    stages = fit_stage_latency(marked.rollouts, 2, "MLflow")
    reflections = fit_reflection_latency(marked, stages, 2, "MLflow")
    assert reflections is not None and reflections.latency.n == len(marked.proposals) >= 8
    # Sleeps overrun and the bookkeeping between adds a little; the rollouts' fit, from spans
    # that hold the same bookkeeping, takes some of it back.
    assert REFLECTION_S - 0.05 < reflections.latency.median < REFLECTION_S + child / 2


def test_a_run_calibrates_with_its_rollouts_timed_by_mlflow(tracked, tmp_path):
    _, uri, run_id = tracked
    out = tmp_path / "past.toml"
    # The real run took a second; a given wall-clock stands in for a run that took minutes.
    done = run_pxn(
        "calibrate", f"mlflow:{run_id}", "--tracking-uri", uri, "--workers", "2",
        "--wall-clock", "20min", "--draws", "10", "-o", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "measured by MLflow's stage times" in done.stdout and out.exists()


def test_an_mlflow_run_that_is_no_gepa_run_is_one_line(tracked, tmp_path):
    _, uri, _ = tracked
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run() as other:
        mlflow.log_metric("loss", 0.5)
    out = tmp_path / "out.toml"
    done = run_pxn(
        "calibrate", f"mlflow:{other.info.run_id}", "--tracking-uri", uri, "--workers", "2",
        "-o", out,
    )  # fmt: skip
    assert_user_error(done, "holds none of gepa's metrics", "loss")
    assert not out.exists()
    done = run_pxn("calibrate", "mlflow:no-such-run", "--tracking-uri", uri, "-o", out)
    assert_user_error(done, "cannot be read from")
    assert not out.exists()


def test_a_dspy_gepa_log_dir_and_its_mlflow_run_tell_what_its_recording_tells(tmp_path):
    """A real dspy.GEPA compile (DSPy's DummyLM as both models: DSPy's own test LM) with
    use_mlflow=True, recorded: its log_dir reads as dspy.GEPA's (C = 1, its threads split per
    candidate), its search as the recording's, its MLflow run marks its stages."""
    dspy = pytest.importorskip("dspy")
    from dspy.utils.dummies import DummyLM
    from dspy_program import Topic, examples, optimizer

    from pxn.calibrate.past_runs.to_trace import past_run_events, write_past_run_trace
    from pxn.run_summary import summarize
    from pxn.runner.dspy_recording import recorded
    from pxn.trace_reading import read_trace

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    task = DummyLM({"": {"topic": "none"}})  # never right: no parent is skipped as perfect
    proposals = DummyLM(
        [{"new_instruction": f"Name the topic (try {i})."} for i in range(40)],
        adapter=dspy.JSONAdapter(),
    )
    for lm in (task, proposals):
        lm.cache = False
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        # dspy.GEPA passes gepa no tracking URI or experiment here: MLflow's process-wide
        # ones decide, and an earlier test may have set them to another store.
        in_store(uri, "dspy-gepa", tmp_path)
        opt = recorded(optimizer(proposals, max_metric_calls=40, use_mlflow=True), out)
        with dspy.context(lm=task):
            opt.compile(
                dspy.Predict(Topic), trainset=examples("train", 6), valset=examples("val", 4)
            )
    log_dir = out / "gepa"
    files = read_run_dir(log_dir)
    assert files.state is not None and files.state.dspy
    run = past_run(files)
    events = past_run_events(run, workers=2, reflection_concurrency=1, budget=40, meta={})
    from_dir = summarize(read_trace(write_past_run_trace(tmp_path / "past.jsonl", events)))
    recorded_run = summarize(read_trace(out / "trace.jsonl"))
    for figure in ("iterations", "proposals", "accepted", "metric_calls", "seed_score"):
        assert getattr(from_dir, figure) == getattr(recorded_run, figure), figure
    found = find_tracked_run(log_dir, uri)
    assert found is not None
    spans = mlflow_stage_spans(run, read_mlflow_run(f"mlflow:{found}", uri)).rollouts
    assert spans and spans[0].phase == "seed_val"


def test_runs_whose_run_dirs_share_a_name_are_told_apart(tmp_path, monkeypatch):
    """A study's runs/A/gepa and runs/B/gepa, given relative as gepa logs them: each run_dir
    finds its own MLflow run, not the latest one named gepa, and so does a copy of one."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    in_store(uri, "two-runs", tmp_path)
    ids = {}
    for name in ("a", "b"):
        tracked_run(f"runs/{name}/gepa", uri, "two-runs", 30)
        ids[name] = read_mlflow_run("mlflow:experiment:two-runs", uri).run_id
    assert ids["a"] != ids["b"]
    assert find_tracked_run(tmp_path / "runs" / "a" / "gepa", uri) == ids["a"]
    assert find_tracked_run(tmp_path / "runs" / "b" / "gepa", uri) == ids["b"]
    assert find_tracked_run(tmp_path / "copy" / "runs" / "a" / "gepa", uri) == ids["a"]
    assert find_tracked_run(tmp_path / "elsewhere", uri) is None
