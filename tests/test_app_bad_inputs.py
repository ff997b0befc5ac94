"""Bad inputs through the real CLI: each refused in one line, exit code 2, before any work,
and nothing silently accepted (a bare duration, a repeated shape or run, two runs in one
file, a NaN, a binary file, a zero or negative count)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import tomli_w
from calibrate_helpers import write_traces
from conftest import assert_user_error, run_pxn
from sim_helpers import make_scenario

from pxn.shape import Shape


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two simulated single runs, as run directories."""
    return write_traces(tmp_path_factory.mktemp("runs"), make_scenario(budget=200), Shape(1, 1),
                        range(2))  # fmt: skip


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    """A file where a directory would have to be."""
    path = tmp_path / "a-file"
    path.write_text("", encoding="utf-8")
    return path


# -- calibrate: its outputs before its inputs, each run once ----------------------------


def test_calibrate_refuses_its_output_before_reading_a_trace(tmp_path: Path, blocker) -> None:
    # The trace does not exist: an error about it would mean the traces were read first.
    absent = tmp_path / "runs" / "none"
    assert_user_error(
        run_pxn("calibrate", absent, "--output", blocker / "s.toml"),
        f"--output {blocker / 's.toml'} cannot be created: {blocker} is a file",
    )
    assert_user_error(
        run_pxn("calibrate", absent, "-o", tmp_path / "s.toml", "--plots", blocker),
        f"--plots {blocker} is a file, not a directory",
    )


def test_calibrate_will_not_write_over_a_trace_it_reads(runs: list[Path]) -> None:
    trace = runs[0] / "trace.jsonl"
    before = trace.read_bytes()
    assert_user_error(
        run_pxn("calibrate", *runs, "--output", trace),
        f"--output {trace} is one of the inputs; write elsewhere",
    )
    assert trace.read_bytes() == before


def test_an_export_will_not_write_over_the_trace_it_reads(runs: list[Path]) -> None:
    trace = runs[1] / "trace.jsonl"
    before = trace.read_bytes()
    assert_user_error(
        run_pxn("trace", "export", runs[1], "--chrome", trace),
        f"--chrome {trace} is one of the inputs; write elsewhere",
    )
    assert_user_error(
        run_pxn("plot", "timeline", trace, "-o", trace), f"output {trace} is one of the inputs"
    )
    assert trace.read_bytes() == before


def test_calibrate_refuses_a_run_given_twice(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "s.toml"
    trace = runs[0] / "trace.jsonl"
    assert_user_error(
        run_pxn("calibrate", runs[0], runs[1], trace, "-o", out),
        f"{trace} is given twice: give each run once",
    )
    copy = Path(shutil.copytree(runs[0], tmp_path / "copy"))
    assert_user_error(
        run_pxn("calibrate", runs[0], copy, "-o", out),
        f"{trace} and {copy / 'trace.jsonl'} hold the same run",
    )
    assert not out.exists()


def test_calibrate_refuses_two_runs_in_one_file(runs: list[Path], tmp_path: Path) -> None:
    first, second = ((r / "trace.jsonl").read_text(encoding="utf-8") for r in runs)
    both = tmp_path / "both.jsonl"
    both.write_text(first + second, encoding="utf-8")
    line = first.count("\n") + 1
    out = tmp_path / "s.toml"
    assert_user_error(
        run_pxn("calibrate", both, "-o", out),
        f"{both} line {line}: a second run_start",
        f"(head -n {line - 1} and tail -n +{line})",
    )
    assert not out.exists()
    # Beside a usable trace it is set aside, named, as any unusable trace is: never read as one.
    done = run_pxn("calibrate", both, runs[0], "-o", out, "--draws", "0")
    assert done.returncode == 0, done.stderr
    assert f"set aside: {both} line {line}: a second run_start" in done.stdout
    assert "calibrated from 1 trace(s)" in done.stdout


SUMMARIES = Path(__file__).resolve().parents[1] / "experiments" / "paper" / "hover.summaries.toml"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # With --summaries this one was a ValueError traceback from the process pool.
        (["--summaries", SUMMARIES, "--jobs", "0"], "--jobs must be a whole number >= 1: got 0"),
        (["--draws", "1000000000"], "--draws must be at most 10000"),
        (["--name", " "], "--name must not be empty"),
    ],
    ids=["jobs", "draws", "name"],
)
def test_calibrate_refuses_a_bad_flag_before_any_work(
    flags: list, message: str, runs: list[Path], tmp_path: Path
) -> None:
    traces = [] if "--summaries" in flags else runs
    out = tmp_path / "s.toml"
    assert_user_error(run_pxn("calibrate", *traces, "-o", out, *flags), message)
    assert not out.exists()


def test_a_timeline_up_to_a_negative_iteration_is_refused(runs: list[Path], tmp_path) -> None:
    assert_user_error(
        run_pxn("plot", "timeline", runs[0], "-o", tmp_path / "t.png", "--iterations", "-1"),
        "--iterations must be a whole number >= 0: got -1",
    )


# -- predict's inputs that are this engineer's: durations, shapes, scenario files --------


def test_a_deadline_without_a_unit_is_refused() -> None:
    assert_user_error(
        run_pxn("advise", "hover", "--budget", "3000", "--deadline", "90"),
        "--deadline 90 has no unit; give a unit: 90s, 90m or 90h",
    )


def test_a_shape_named_twice_is_refused() -> None:
    assert_user_error(
        run_pxn("sweep", "hover", "--shapes", "single,2x2,1x1"),
        "--shapes name each shape once: single twice",
    )


def test_a_binary_scenario_is_not_a_toml_text_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert_user_error(
        run_pxn("simulate", path), f"scenario {path} is not a TOML text file (it holds binary data)"
    )


def scenario_with(tmp_path: Path, **changes) -> Path:
    """make_scenario()'s TOML with some fields replaced (TOML writes NaN as nan)."""
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(make_scenario().to_dict() | changes), encoding="utf-8")
    return path


def test_a_nan_in_an_empirical_sample_is_named_by_table_and_index(tmp_path: Path) -> None:
    path = scenario_with(tmp_path, rollout={"dist": "empirical", "samples": [2.0, math.nan]})
    assert_user_error(
        run_pxn("simulate", path),
        "[rollout] samples[1] is nan: a scenario's numbers must be finite",
    )


def test_an_infinite_overhead_is_refused_not_simulated(tmp_path: Path) -> None:
    # It was simulated: every wall-clock came out inf.
    path = scenario_with(tmp_path, stage_overhead=math.inf)
    assert_user_error(run_pxn("simulate", path), "stage_overhead is inf")


@pytest.mark.parametrize("key", ["lm_servers", "load_slowdown"])
def test_a_top_level_pool_key_is_an_unknown_field(tmp_path: Path, key: str) -> None:
    # The local LM pool is spelled [load.task] and [load.reflection] only.
    path = scenario_with(tmp_path, **{key: 2})
    assert_user_error(run_pxn("simulate", path), f"has an unknown field {key!r}")


# -- run: a zero or negative count is a mistake, not a default --------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--reflection-concurrency", "0", "--reflection-concurrency must be at least 1, got 0"),
        ("--seed", "-1", "--seed must be a whole number >= 0, got -1"),
        ("--max-merges", "0", "--max-merges must be at least 1, got 0"),
    ],
)
def test_run_refuses_a_bad_count_before_starting(
    flag: str, value: str, message: str, tmp_path: Path
) -> None:
    # --backend is checked after these: were the count let through, that would be
    # the error (and without it, a full run would start).
    out = tmp_path / "run"
    done = run_pxn("run", "--out", out, flag, value, "--backend", "nowhere")
    assert_user_error(done, message)
    assert not out.exists()


def test_run_refuses_an_unwritable_run_directory_first(blocker: Path) -> None:
    assert_user_error(
        run_pxn("run", "--out", blocker / "run", "--seed", "-1"),
        f"--out {blocker / 'run'} cannot be created: {blocker} is a file",
    )


# -- what the command line cannot parse --------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["simulate", "hover", "--bogus"], ["no such option: --bogus", "pxn simulate --help"]),
        (["simulate"], ["missing argument 'scenario'", "pxn simulate --help"]),
        (["advise", "hover", "--deadline", "3", "hours"], ["unexpected extra argument", "hours"]),
        (["sweep", "hover", "--reps", "x"], ["'--reps'", "pxn sweep --help"]),
        (["calibrate"], ["missing option", "--output"]),
    ],
)
def test_what_cannot_be_parsed_is_one_line_naming_the_help(args, fragments) -> None:
    assert_user_error(run_pxn(*args), *fragments)


def test_pxn_alone_prints_its_help() -> None:
    done = run_pxn()
    assert done.returncode == 2 and "simulate" in done.stdout and done.stderr == ""
