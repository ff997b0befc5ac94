"""The real `pxn` console script: exit codes, one-line errors, and its outputs."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sim_helpers import make_scenario

PXN = Path(sys.executable).parent / "pxn"


def pxn(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PXN), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    make_scenario(budget=200).save(path)
    return path


def assert_user_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit code 2, exactly one line on stderr, no traceback, nothing on stdout."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pxn: error: ")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0]


def test_bad_shape_is_one_line_and_exit_2() -> None:
    assert_user_error(
        pxn("simulate", "hover", "--shape", "2x0"), "shape needs P, N >= 1 (P x N): got '2x0'"
    )


def test_unknown_preset(tmp_path: Path) -> None:
    result = pxn("simulate", "no-such-preset", cwd=tmp_path)
    assert_user_error(result, "no-such-preset", "livebench-math", "hover")


def test_bad_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = = 3\n", encoding="utf-8")
    assert_user_error(pxn("sweep", bad, "--reps", "5"), "not valid TOML")


def test_invalid_scenario_value(scenario_file: Path) -> None:
    text = scenario_file.read_text().replace("budget = 200", "budget = 5")
    scenario_file.write_text(text, encoding="utf-8")
    assert_user_error(pxn("simulate", scenario_file), "budget 5 is smaller than one seed")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sweep", "--shapes", "single,3x"], "shape is 'PxN'"),
        (["simulate", "--budget", "10"], "budget 10 is smaller than one seed validation"),
        (["simulate", "--workers", "0"], "workers must be a whole number >= 1: got 0"),
    ],
    ids=["bad shape list", "budget override", "workers override"],
)
def test_bad_overrides_are_one_line(args: list[str], fragment: str, scenario_file: Path) -> None:
    command, *flags = args
    assert_user_error(pxn(command, scenario_file, *flags), fragment)


def test_bad_format(scenario_file: Path) -> None:
    assert_user_error(
        pxn("sweep", scenario_file, "--format", "bogus"), "--format is table, csv or json"
    )


def test_too_few_replicates(scenario_file: Path) -> None:
    assert_user_error(pxn("simulate", scenario_file, "--reps", "1"), "--reps must be >= 2")


def test_bad_flag_value_is_a_usage_error_not_a_traceback(scenario_file: Path) -> None:
    result = pxn("sweep", scenario_file, "--reps", "many")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_sweep_writes_csv_json_and_figure(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shapes = ["single", "2x2", "4x1"]
    result = pxn(
        "sweep", scenario_file, "--shapes", ",".join(shapes), "--reps", "20", "--jobs", "1",
        "--format", "csv", "--out", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    printed = list(csv.DictReader(io.StringIO(result.stdout)))
    written = list(csv.DictReader((out / "sweep.csv").open(encoding="utf-8")))
    assert [row["shape"] for row in printed] == shapes == [row["shape"] for row in written]
    for row in written:
        assert int(row["replicates"]) == 20
        assert float(row["wall_clock_p5_s"]) <= float(row["wall_clock_mean_s"])
        assert float(row["wall_clock_mean_s"]) <= float(row["wall_clock_p95_s"])
    assert float(written[0]["speedup_vs_single"]) == 1.0
    data = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert "single" in json.dumps(data) and "4x1" in json.dumps(data)
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_output_different_seed_different(scenario_file: Path) -> None:
    def run(seed: str, jobs: str) -> str:
        result = pxn(
            "sweep", scenario_file, "--shapes", "single,2x2", "--reps", "30",
            "--format", "json", "--seed", seed, "--jobs", jobs,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    first = run("11", "1")
    assert run("11", "2") == first
    assert run("12", "1") != first


def test_simulate_writes_a_trace_and_refuses_to_overwrite_it(
    scenario_file: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "run.jsonl"
    result = pxn("simulate", scenario_file, "--shape", "2x2", "--reps", "5", "--trace", trace)
    assert result.returncode == 0, result.stderr
    assert "2x2" in result.stdout
    written = trace.read_bytes()
    assert written.startswith(b'{"kind": "run_start"')
    again = pxn("simulate", scenario_file, "--shape", "2x2", "--reps", "5", "--trace", trace)
    assert_user_error(again, "already exists")
    assert trace.read_bytes() == written


def test_preset_simulates() -> None:
    result = pxn("simulate", "hover", "--shape", "2x2", "--reps", "4")
    assert result.returncode == 0, result.stderr
    assert "2x2" in result.stdout


def test_the_table_names_a_local_pool_only_when_there_is_one() -> None:
    from pxn.app.prediction_report import predictions_table
    from pxn.shape import Shape
    from pxn.sim.predict import sweep

    plain = make_scenario()
    pooled = plain.with_local_pool(2, 0.4)
    titles = [str(predictions_table(s, sweep(s, [Shape(1, 1)], 2)).title) for s in (plain, pooled)]
    assert "LM server" not in titles[0] and "slowdown" not in titles[0]
    assert "W=8, 2 LM server(s), load slowdown 0.4, 2 replicates" in titles[1]
