"""Runs already made, as gepa 0.1.4 left them: a run_dir read without a recorder, checked
against the same run's recording; its pickle read without running what it names; every
unusable directory one line, nothing written."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import shutil
from pathlib import Path

import gepa
import pytest
from conftest import assert_user_error, run_pxn
from gepa.core.adapter import EvaluationBatch
from gepa.strategies.proposal_sampling import PxNSampling
from merge_helpers import SEED as MERGE_SEED
from merge_helpers import TRAIN as MERGE_TRAIN
from merge_helpers import VAL as MERGE_VAL
from merge_helpers import AlikeLM, MergingAdapter
from record_helpers import (
    SEED,
    TRAIN,
    VAL,
    CallableLM,
    ProposingAdapter,
    SerialAdapter,
    ThreadedAdapter,
)
from record_helpers import score as word_score

from pxn.calibrate.past_runs.gepa_log import parse_log
from pxn.calibrate.past_runs.past_run import past_run
from pxn.calibrate.past_runs.run_dir import read_run_dir
from pxn.calibrate.past_runs.safe_pickle import load_admitted
from pxn.calibrate.past_runs.timing import file_times, given_wall_clock
from pxn.calibrate.past_runs.to_trace import past_run_events, write_past_run_trace
from pxn.calibrate.traces.quality import seed_validation
from pxn.run_summary import summarize
from pxn.runner.record import recording
from pxn.scenario import Scenario
from pxn.trace import NoProposal, Rollout, Validation
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
    assert_user_error(done, "refused unread", "no gepa log was read")
    assert not marker.exists() and not out.exists()


def test_the_admitted_pickle_is_what_gepa_writes(single_run):
    state = load_admitted((single_run / "gepa_state.bin").read_bytes(), "state")
    assert state["validation_schema_version"] == 5
    assert state == pickle.loads((single_run / "gepa_state.bin").read_bytes())
    import numpy as np

    scores = {"s": np.float64(0.5), "set": {1, 2}, "t": (1, "a")}
    assert load_admitted(pickle.dumps(scores), "x") == scores


# -- the validation scores from gepa's log lines ---------------------------------------------


class Answer:
    """An adapter's output of the test's own: gepa keeps the outputs in its state by default
    (track_best_outputs=True), and no gepa state names this class."""

    def __init__(self, example: str):
        self.example = example


class AnsweringAdapter(SerialAdapter):
    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False):
        done = super().evaluate(batch, candidate, capture_traces)
        return EvaluationBatch(
            outputs=[Answer(example) for example in batch],
            scores=done.scores,
            trajectories=done.trajectories,
        )


def gepa_run(run_dir: Path, adapter, lm, **kw) -> Path:
    """A real gepa run, not recorded: its run_dir as a user's run leaves it."""
    arguments = dict(
        seed_candidate=SEED, trainset=TRAIN, valset=VAL, adapter=adapter, reflection_lm=lm,
        max_metric_calls=80, display_progress_bar=False, run_dir=str(run_dir),
    )  # fmt: skip
    gepa.optimize(**{**arguments, **kw})
    return run_dir


@pytest.fixture(scope="module")
def refused_run(tmp_path_factory) -> Path:
    """A run whose state holds the adapter's own outputs: pxn leaves it unread."""
    run_dir = tmp_path_factory.mktemp("refused") / "run_dir"
    return gepa_run(run_dir, AnsweringAdapter(), CallableLM(), track_best_outputs=True)


@pytest.fixture(scope="module")
def batched_merge_run(tmp_path_factory) -> Path:
    """test_runner_merge.py's 2x2 run: iterations with two new programs, merges accepted."""
    return gepa_run(
        tmp_path_factory.mktemp("merged") / "run_dir", MergingAdapter(), AlikeLM(),
        seed_candidate=MERGE_SEED, trainset=MERGE_TRAIN, valset=MERGE_VAL, use_merge=True,
        max_metric_calls=250, seed=3, sampling_strategy=PxNSampling(2, 2),
    )  # fmt: skip


def as_trace(run, tmp_path: Path, name: str):
    events = past_run_events(run, workers=2, reflection_concurrency=1, budget=80, meta={})
    return read_trace(write_past_run_trace(tmp_path / f"{name}.jsonl", events))


def words(text: str) -> str:
    """Text as the report prints it, its lines' wrapping undone."""
    return " ".join(text.split())


def test_a_refused_state_leaves_the_validation_scores_to_gepas_log(tmp_path, refused_run):
    files = read_run_dir(refused_run)
    assert files.state is None
    assert f"names {__name__}.Answer, which no gepa 0.1.4 state holds" in files.state_note
    run = past_run(files, parse_log(files.log_lines, "run_log.txt"))
    scores = run.val_scores
    assert scores is not None and scores.from_log
    candidates = json.loads((refused_run / "candidates.json").read_text())
    assert len(scores.means) == len(candidates) > 2
    # Every new program's score on each example is what it scores there; the seed's mean alone.
    new = zip(candidates[1:], scores.per_example[1:], scores.means[1:], strict=True)
    for candidate, known, mean in new:
        assert known == {i: word_score(candidate, example) for i, example in enumerate(VAL)}
        assert mean == sum(known.values()) / len(VAL)
    assert scores.per_example[0] == {}
    assert scores.means[0] == pytest.approx(sum(word_score(SEED, e) for e in VAL) / len(VAL))
    # The trace: the seed's validation at its mean, its rollouts unscored.
    trace = as_trace(run, tmp_path, "past")
    seed = [r for r in trace.of(Rollout) if r.phase == "seed_val"]
    assert len(seed) == len(VAL) and all(r.score is None for r in seed)
    summary = summarize(trace)
    assert summary.seed_score == scores.means[0]
    assert summary.best_score == max(scores.means)
    # Without the seed's scores on each example their spread is not known (over the other
    # candidates it would be another figure); the seed's validation is kept as unmeasured.
    assert math.isnan(summary.example_spread)
    assert seed_validation([trace]) == ()


def test_a_run_dir_reused_afresh_gives_the_last_runs_scores(
    tmp_path, refused_run, batched_merge_run
):
    """gepa appends to run_log.txt: a run started afresh in a run_dir whose state was deleted
    follows the earlier run's lines, and run_log.json is the last run's."""
    run_dir = tmp_path / "run_dir"
    shutil.copytree(refused_run, run_dir)
    earlier = (batched_merge_run / "run_log.txt").read_text()
    (run_dir / "run_log.txt").write_text(earlier + (refused_run / "run_log.txt").read_text())
    alone = read_run_dir(refused_run)
    both = read_run_dir(run_dir)
    scores = past_run(both, parse_log(both.log_lines, "run_log.txt")).val_scores
    expected = past_run(alone, parse_log(alone.log_lines, "run_log.txt")).val_scores
    assert scores.means == expected.means and scores.per_example == expected.per_example
    earlier_seed = parse_log(earlier.splitlines(), "earlier").seed_score
    assert earlier_seed is not None and earlier_seed.mean != scores.means[0]


def proposing_log(run_dir: Path, budget: int) -> list[str]:
    """run_log.txt's lines after gepa's proposing run in `run_dir` (resumed if its state is
    there)."""
    gepa_run(run_dir, ProposingAdapter(), CallableLM(), max_metric_calls=budget)
    return (run_dir / "run_log.txt").read_text().splitlines()


def why_no_proposal(lines: list[str]) -> tuple:
    log = parse_log(lines, "run_log.txt")
    return log.before_reflection, log.at_reflection, log.failed_iterations


def test_a_run_dir_reused_afresh_gives_the_last_runs_reasons(tmp_path, single_run):
    """Why tasks made no proposal, from a run_log.txt a later run appended to: the earlier
    run's reasons are not the later one's."""
    earlier = proposing_log(tmp_path / "earlier", 150)
    later = (single_run / "run_log.txt").read_text().splitlines()
    assert why_no_proposal(earlier)[0]  # reasons the later run must not inherit
    assert why_no_proposal(earlier + later) == why_no_proposal(later)


def test_a_resumed_run_gives_its_reasons_after_the_iteration_it_resumed_at(tmp_path):
    """A resumed gepa logs its seed line again at the last iteration its state had finished,
    and runs the iterations after it: before that line the first run's reasons hold."""
    first = proposing_log(tmp_path / "gepa", 60)
    both = proposing_log(tmp_path / "gepa", 150)
    assert both[: len(first)] == first
    appended = both[len(first) :]  # "Loading gepa state from run dir", then gepa's lines
    at = next(i for i, line in enumerate(appended) if "Base program full valset score" in line)
    seed_line, later = appended[at], appended[at + 1 :]
    resumed_at = int(seed_line.split(":")[0].removeprefix("Iteration "))
    assert resumed_at > 0
    assert int(later[0].split(":")[0].removeprefix("Iteration ")) == resumed_at + 1
    kept = [
        {i: r for i, r in table.items() if i <= resumed_at} if isinstance(table, dict)
        else {i for i in table if i <= resumed_at}
        for table in why_no_proposal(first)
    ]  # fmt: skip
    redone = why_no_proposal([seed_line, *later])
    expected = (kept[0] | redone[0], kept[1] | redone[1], kept[2] | redone[2])
    assert why_no_proposal(both) == expected


def calibrated(run_dir: Path, wall_clock: str, out: Path):
    """`pxn calibrate` on a run_dir at W = 2 and a few draws; it must succeed."""
    done = run_pxn(
        "calibrate", run_dir, "--workers", "2", "--wall-clock", wall_clock, "--draws", "20",
        "-o", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_a_run_whose_state_is_refused_calibrates_its_search_from_gepas_log(tmp_path, refused_run):
    out = tmp_path / "past.toml"
    done = calibrated(refused_run, "1min", out)
    said = words(done.stdout)
    assert (
        f"run_log.txt: every new program's scores on the {len(VAL)} validation examples and "
        "the seed's mean (gepa's log lines; gepa_state.bin names"
    ) in said
    assert "refused unread" in said
    assert "missing: the seed's score on each validation example" in said
    assert "[quality]" in out.read_text()
    scenario = Scenario.load(out)
    assert scenario.quality is not None and scenario.quality.seed_validation == ()
    assert scenario.skip_perfect == 0.0  # the quality model makes its own skips


def test_gepas_log_lines_give_the_states_validation_scores(tmp_path, batched_merge_run):
    """The same run read twice, from its state and from its log: candidate by candidate."""
    files = read_run_dir(batched_merge_run)
    log = parse_log(files.log_lines, "run_log.txt")
    from_state = past_run(files, log)
    from_log = past_run(dataclasses.replace(files, state=None, state_note="set aside"), log)
    # The run: batched iterations that found two new programs, and merges accepted.
    assert any(len(r.new_programs) > 1 for r in from_state.iterations)
    assert any(r.merge is not None and r.merge.candidate for r in from_state.iterations)
    state, logged = from_state.val_scores, from_log.val_scores
    assert state is not None and not state.from_log
    assert logged is not None and logged.from_log
    assert len(logged.means) == len(state.means) > 5
    for candidate in range(1, len(state.means)):
        assert logged.per_example[candidate] == state.per_example[candidate], candidate
        assert logged.means[candidate] == state.means[candidate], candidate
    assert logged.per_example[0] == {} and logged.means[0] == pytest.approx(state.means[0])
    assert from_log.valset == from_state.valset
    # The search's figures agree, but for the examples' spread, which needs the seed's.
    with_state = summarize(as_trace(from_state, tmp_path, "state"))
    with_log = summarize(as_trace(from_log, tmp_path, "log"))
    for figure in ("seed_score", "best_score", "acceptance", "skip_share", "merges_accepted"):
        assert getattr(with_log, figure) == pytest.approx(getattr(with_state, figure)), figure
    assert with_log.figures.val_gain == pytest.approx(with_state.figures.val_gain)
    assert math.isfinite(with_state.example_spread) and math.isnan(with_log.example_spread)


def without_score_lines(lines: list[str]) -> list[str]:
    scored = ("Base program full valset score", "Individual valset scores")
    return [line for line in lines if not any(s in line for s in scored)]


def without_first_programs_scores(lines: list[str]) -> list[str]:
    first = next(i for i, line in enumerate(lines) if "Individual valset scores" in line)
    return lines[:first] + lines[first + 1 :]


@pytest.mark.parametrize(
    ("cut", "said"),
    [
        (without_score_lines, "holds no validation score"),
        (without_first_programs_scores, "lacks the scores of new program(s) 1"),
    ],
    ids=["no score lines", "a program's line lost"],
)
def test_a_log_short_of_scores_leaves_the_search_to_acceptance_rates(
    tmp_path, refused_run, cut, said
):
    run_dir = tmp_path / "run_dir"
    shutil.copytree(refused_run, run_dir)
    log = run_dir / "run_log.txt"
    lines = log.read_text().splitlines(keepends=True)
    kept = cut(lines)
    assert len(kept) < len(lines)
    log.write_text("".join(kept))
    files = read_run_dir(run_dir)
    run = past_run(files, parse_log(files.log_lines, "run_log.txt"))
    assert run.val_scores is None and said in run.val_note
    trace = as_trace(run, tmp_path, "past")
    assert not trace.of(Validation) and summarize(trace).best_score is None
    out = tmp_path / "out.toml"
    done = run_pxn(
        "calibrate", run_dir, "--workers", "2", "--wall-clock", "1min", "--search", "quality",
        "-o", out,
    )  # fmt: skip
    assert_user_error(
        done, "needs the run's validation scores", "refused unread", said, "acceptance rates"
    )
    assert not out.exists()


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
    done = calibrated(single_run, "20min", out)
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
    files = read_run_dir(run_dir)
    with_log = past_run(files, log)
    assert with_log.reasons_guessed == 0
    # DSPy's lines carry the validation scores as run_log.txt's do.
    from_log = past_run(dataclasses.replace(files, state=None, state_note="set aside"), log)
    assert from_log.val_scores.from_log and len(from_log.val_scores.means) > 1
    assert from_log.val_scores.per_example[1:] == with_log.val_scores.per_example[1:]
    assert from_log.val_scores.means[0] == pytest.approx(with_log.val_scores.means[0])
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
