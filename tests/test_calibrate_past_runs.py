"""Runs already made, as gepa 0.1.4 left them: a run_dir read without a recorder, checked
against the same run's recording; its pickle read without running what it names; every
unusable directory one line, nothing written."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import gepa
import pytest
from conftest import assert_user_error, run_pxn
from gepa.strategies.proposal_sampling import PxNSampling
from merge_helpers import SEED as MERGE_SEED
from merge_helpers import TRAIN as MERGE_TRAIN
from merge_helpers import VAL as MERGE_VAL
from merge_helpers import AlikeLM, MergingAdapter
from record_helpers import SEED, TRAIN, VAL, CallableLM, ProposingAdapter, ThreadedAdapter

from pxn.calibrate.past_runs.gepa_log import parse_log
from pxn.calibrate.past_runs.past_run import past_run
from pxn.calibrate.past_runs.run_dir import read_run_dir
from pxn.calibrate.past_runs.safe_pickle import load_admitted
from pxn.calibrate.past_runs.timing import file_times, given_wall_clock
from pxn.calibrate.past_runs.to_trace import past_run_events, write_past_run_trace
from pxn.run_summary import summarize
from pxn.runner.record import recording
from pxn.trace import NoProposal
from pxn.trace_reading import read_trace

SUMMARY_FIGURES = (
    "iterations",
    "full_val_iterations",
    "proposals",
    "accepted",
    "metric_calls",
    "skipped",
    "failed",
    "merges",
    "merges_accepted",
    "seed_score",
    "best_score",
)


def recorded_run(out: Path, adapter, lm, **kw) -> Path:
    """A real gepa run recorded into `out`; gepa's own run_dir is out/gepa."""
    arguments = dict(
        seed_candidate=SEED,
        trainset=TRAIN,
        valset=VAL,
        adapter=adapter,
        reflection_lm=lm,
        max_metric_calls=80,
        display_progress_bar=False,
    )
    with recording(out, workers=2) as rec:
        gepa.optimize(**rec.wrap(**{**arguments, **kw}))
    return out / "gepa"


def past_trace(run_dir: Path, tmp_path: Path, **kw):
    files = read_run_dir(run_dir)
    log = parse_log(files.log_lines, "run_log.txt") if files.log_lines else None
    run = past_run(files, log)
    events = past_run_events(
        run, workers=2, reflection_concurrency=kw.get("concurrency", 1), budget=80, meta={}
    )
    return run, read_trace(write_past_run_trace(tmp_path / "past.jsonl", events))


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    return recorded_run(out, ThreadedAdapter(2), CallableLM())


# -- the run_dir says what the recording says --------------------------------------------


@pytest.mark.parametrize("kind", ["single", "2x2", "merge", "proposing"], ids=lambda k: f"{k} run")
def test_a_run_dir_tells_the_search_the_recording_of_the_same_run_tells(tmp_path, kind):
    lm = AlikeLM() if kind == "merge" else CallableLM()
    adapter = {"merge": MergingAdapter(), "proposing": ProposingAdapter()}.get(
        kind, ThreadedAdapter(2)
    )
    kw = {}
    if kind == "2x2":
        kw["sampling_strategy"] = PxNSampling(2, 2)
    if kind == "merge":  # test_runner_merge.py's run: two merges accepted, two rejected
        kw |= dict(seed_candidate=MERGE_SEED, trainset=MERGE_TRAIN, valset=MERGE_VAL,
                   use_merge=True, max_metric_calls=250, seed=3,
                   sampling_strategy=PxNSampling(2, 2))  # fmt: skip
    run_dir = recorded_run(tmp_path / "run", adapter, lm, **kw)
    recorded = summarize(read_trace(tmp_path / "run" / "trace.jsonl"))
    run, trace = past_trace(run_dir, tmp_path)
    from_dir = summarize(trace)
    for figure in SUMMARY_FIGURES:
        assert getattr(from_dir, figure) == getattr(recorded, figure), figure
    assert from_dir.figures.val_gain == pytest.approx(recorded.figures.val_gain)
    assert from_dir.figures.example_spread == pytest.approx(recorded.figures.example_spread)
    # A P x N run whose draws kept picking one parent cannot tell 2x2 from 1x4: it says so.
    assert str(run.shape) == ("2x2" if kind in ("2x2", "merge") else "1x1")
    # No duration is made up: every event an instant, every rollout untimed.
    assert all(e.start == e.end for e in trace.events)
    assert trace.run_start.meta["durations"] == "none"
    if kind == "merge":
        assert from_dir.merges_accepted >= 1 and from_dir.merges > from_dir.merges_accepted


def test_why_a_task_made_no_proposal_comes_from_gepas_log(tmp_path):
    """The proposing adapter's run skips perfect parents: run_log.txt says which."""
    run_dir = recorded_run(tmp_path / "run", ProposingAdapter(), CallableLM(), max_metric_calls=150)
    recorded = read_trace(tmp_path / "run" / "trace.jsonl")
    run, trace = past_trace(run_dir, tmp_path)
    reasons = sorted((e.iteration, e.reason) for e in trace.of(NoProposal))
    assert reasons == sorted((e.iteration, e.reason) for e in recorded.of(NoProposal))
    assert run.reasons_guessed == 0
    # Without the log the reasons are read off the scores, and said to be.
    (run_dir / "run_log.txt").unlink()
    guessed = past_run(read_run_dir(run_dir))
    assert guessed.reasons_guessed == sum(1 for r in run.iterations for t in r.tasks if t.reason)


def test_the_budget_is_any_the_run_stopped_at(single_run):
    run = past_run(read_run_dir(single_run))
    assert run.budget_low < 80 <= run.budget_high == run.metric_calls


def test_the_files_times_mark_the_run_in_gepas_order(single_run, tmp_path):
    files = read_run_dir(single_run)
    times = file_times(single_run, files.log_lines)
    assert times.trusted and times.start <= times.seed_end <= times.end
    # A copy that stamps every file anew leaves them out of gepa's order, or all at once.
    copied = tmp_path / "copied"
    shutil.copytree(single_run, copied, copy_function=shutil.copy)
    stamp = 1_800_000_000
    for path in copied.rglob("*"):
        os.utime(path, (stamp, stamp))
    assert not file_times(copied, files.log_lines).trusted


def test_a_wall_clock_is_known_to_half_its_last_digit():
    assert given_wall_clock("47min").precision == 30
    assert given_wall_clock("1.5h").precision == 180
    assert given_wall_clock("90s").low == 90


# -- a pickle is code ----------------------------------------------------------------------


class Runs:
    """Unpickled by pickle, this would run `command`: what an attacker's state file holds."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


@pytest.mark.parametrize("what", ["a command", "a file write", "an import"])
def test_a_crafted_state_runs_nothing_and_is_refused_in_one_line(tmp_path, single_run, what):
    marker = tmp_path / "pwned"
    payload = {
        "a command": Runs(os.system, f"touch {marker}"),
        "a file write": Runs(Path.write_text, marker, "owned"),
        "an import": Runs(__import__, "antigravity"),
    }[what]
    run_dir = tmp_path / "run_dir"
    shutil.copytree(single_run, run_dir)
    state = pickle.loads((run_dir / "gepa_state.bin").read_bytes())
    state["adapter_state"] = {"x": payload}
    (run_dir / "gepa_state.bin").write_bytes(pickle.dumps(state))
    # Left unread, and said to be: the run is read from its other files.
    files = read_run_dir(run_dir)
    assert files.state is None
    assert "refused unread" in files.state_note and "\n" not in files.state_note
    assert not marker.exists()
    # Where gepa's log gives no scores either, asking for the quality model says why in one
    # line, the refusal among it.
    (run_dir / "run_log.txt").unlink()
    out = tmp_path / "out.toml"
    done = run_pxn(
        "calibrate", run_dir, "--workers", "2", "--wall-clock", "10min", "--search", "quality",
        "-o", out,
    )  # fmt: skip
    assert_user_error(done, "refused unread")
    assert not marker.exists() and not out.exists()


def test_the_admitted_pickle_is_what_gepa_writes(single_run):
    state = load_admitted((single_run / "gepa_state.bin").read_bytes(), "state")
    assert state["validation_schema_version"] == 5
    assert state == pickle.loads((single_run / "gepa_state.bin").read_bytes())
    import numpy as np

    scores = {"s": np.float64(0.5), "set": {1, 2}, "t": (1, "a")}
    assert load_admitted(pickle.dumps(scores), "x") == scores


# -- every unusable directory is one line, and nothing is written --------------------------


def cut_in_half(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def other_schema(path: Path) -> None:
    state = pickle.loads(path.read_bytes())
    state["validation_schema_version"] = 4
    path.write_bytes(pickle.dumps(state))


def being_saved(run_dir: Path) -> None:
    """gepa mid-save: its state written to a .tmp, not yet renamed over the old one."""
    data = (run_dir / "gepa_state.bin").read_bytes()
    (run_dir / "gepa_state.bin.tmp").write_bytes(data[: len(data) // 3])


def half_saved(run_dir: Path) -> None:
    """The state saved a iteration further than the run log (gepa writes the state first)."""
    log = json.loads((run_dir / "run_log.json").read_text())
    (run_dir / "run_log.json").write_text(json.dumps(log[:-1]))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: shutil.rmtree(d) or d.mkdir(), "is empty"),
        (being_saved, "gepa is writing its state"),
        (half_saved, "a save caught half done"),
        (lambda d: cut_in_half(d / "run_log.json"), "is cut short"),
        (lambda d: other_schema(d / "gepa_state.bin"), "state schema version 4"),
        (lambda d: (d / "run_log.json").unlink(), "no run_log.json"),
    ],
    ids=["empty", "being written", "half saved", "truncated run log", "other schema",
         "no run log"],
)  # fmt: skip
def test_an_unusable_run_dir_is_one_line_and_nothing_is_written(tmp_path, single_run, damage, says):
    run_dir = tmp_path / "run_dir"
    shutil.copytree(single_run, run_dir)
    damage(run_dir)
    out = tmp_path / "out.toml"
    done = run_pxn("calibrate", run_dir, "--workers", "2", "--wall-clock", "10min", "-o", out)
    assert_user_error(done, says)
    assert not out.exists()


def test_a_log_dir_whose_run_ended_before_an_iteration_asks_for_one(tmp_path):
    """max_metric_calls spent on the seed's validation: gepa saves a state, no run log."""
    run_dir = tmp_path / "run_dir"
    gepa.optimize(
        seed_candidate=SEED, trainset=TRAIN, valset=VAL, adapter=ThreadedAdapter(2),
        reflection_lm=CallableLM(), max_metric_calls=len(VAL), run_dir=str(run_dir),
    )  # fmt: skip
    assert (run_dir / "gepa_state.bin").exists() and not (run_dir / "run_log.json").exists()
    out = tmp_path / "out.toml"
    done = run_pxn("calibrate", run_dir, "--workers", "2", "--wall-clock", "1min", "-o", out)
    assert_user_error(done, "before its first iteration")
    assert not out.exists()


def test_a_past_run_needs_its_workers_and_a_time(tmp_path, single_run):
    out = tmp_path / "out.toml"
    done = run_pxn("calibrate", single_run, "--wall-clock", "10min", "-o", out)
    assert_user_error(done, "--workers is not kept in a run_dir")
    copied = tmp_path / "copied"
    shutil.copytree(single_run, copied)
    for path in copied.rglob("*"):
        os.utime(path, (1_800_000_000, 1_800_000_000))
    done = run_pxn("calibrate", copied, "--workers", "2", "-o", out)
    assert_user_error(done, "--wall-clock is not known")
    assert not out.exists()


def test_past_run_flags_are_refused_for_traces(tmp_path, single_run):
    done = run_pxn(
        "calibrate", single_run.parent / "trace.jsonl", "--wall-clock", "5min", "-o",
        tmp_path / "x.toml",
    )  # fmt: skip
    assert_user_error(done, "--wall-clock applies to a run calibrated from its run_dir")


# -- a whole calibration ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_dir_calibrates_to_a_scenario_of_its_setup(tmp_path, single_run):
    out = tmp_path / "past.toml"
    done = run_pxn(
        "calibrate", single_run, "--workers", "2", "--wall-clock", "20min", "--draws", "20",
        "-o", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "wall-clock 20.0 min (given (20min))" in done.stdout
    from pxn.scenario import Scenario

    scenario = Scenario.load(out)
    assert (scenario.workers, scenario.valset_size, scenario.minibatch) == (2, len(VAL), 3)
    assert scenario.quality is not None and len(scenario.uncertainty.draws) == 20
    # One run cannot show how the next one's conditions differ, nor its own: its draws carry
    # the prior's, times sqrt(2).
    for role in ("task", "reflection"):
        spreads = [d[f"load.{role}.run_spread"] for d in scenario.uncertainty.draws]
        assert min(spreads) >= 0 and max(spreads) <= 0.4 * 2**0.5
        assert max(spreads) - min(spreads) > 0.1
    assert "run spread: not identifiable from one run" in done.stdout
    intro = done.stdout.split("inferred from")[0].splitlines()
    assert all(len(line) <= 100 for line in intro)
    assert "a recorded run would narrow" in done.stdout


def test_dspys_log_lines_are_read_with_their_times(tmp_path):
    """gepa logging through dspy.GEPA's logger (its LoggerAdapter, DSPy's line format) into a
    file, as a user keeps DSPy's output: gepa's lines, their times, the reasons."""
    import logging

    pytest.importorskip("dspy")
    from dspy.teleprompt.gepa.gepa_utils import LoggerAdapter
    from dspy.utils.logging_utils import LOGGING_DATETIME_FORMAT, LOGGING_LINE_FORMAT

    from pxn.calibrate.past_runs.gepa_log import read_log_file
    from pxn.calibrate.past_runs.stage_times import coarse, log_stage_spans
    from pxn.calibrate.past_runs.timing import logged_wall_clock

    logger = logging.getLogger("dspy.teleprompt.gepa.gepa.pastrunstest")
    handler = logging.FileHandler(tmp_path / "dspy.log")
    handler.setFormatter(logging.Formatter(LOGGING_LINE_FORMAT, LOGGING_DATETIME_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        run_dir = recorded_run(
            tmp_path / "run", ProposingAdapter(), CallableLM(), max_metric_calls=150,
            logger=LoggerAdapter(logger),
        )  # fmt: skip
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert not (run_dir / "run_log.txt").exists()  # a logger given: gepa writes none
    log = read_log_file(tmp_path / "dspy.log")
    assert log.timed and logged_wall_clock(log) is not None
    recorded = read_trace(tmp_path / "run" / "trace.jsonl")
    with_log = past_run(read_run_dir(run_dir), log)
    assert with_log.reasons_guessed == 0
    events = past_run_events(with_log, workers=2, reflection_concurrency=1, budget=150, meta={})
    trace = read_trace(write_past_run_trace(tmp_path / "past.jsonl", events))
    reasons = sorted((e.iteration, e.reason) for e in trace.of(NoProposal))
    assert reasons == sorted((e.iteration, e.reason) for e in recorded.of(NoProposal))
    # The run took well under a second: whole seconds time none of its stages.
    spans = log_stage_spans(with_log, log)
    assert coarse([s.span for s in spans.rollouts]) and coarse(spans.reflections)


def test_a_log_without_gepas_lines_is_one_line(tmp_path, single_run):
    noise = tmp_path / "noise.log"
    noise.write_text("2026/12/07 01:44:35 WARNING dspy.clients.lm: LM response was truncated\n")
    out = tmp_path / "out.toml"
    done = run_pxn("calibrate", single_run, "--workers", "2", "--log", noise, "-o", out)
    assert_user_error(done, "holds no line of gepa's log")
    assert not out.exists()
