"""Damaged and foreign traces: a clear message with the line, calibration from what is valid.

These go through the CLI's main() (and once through the real console script):
the promise is about what a person sees (one line on stderr, exit code 2, no
traceback, no half-written output).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calibrate_helpers import TRUE, write_traces
from conftest import assert_user_error, run_pxn, run_pxn_script

from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.trace import SCHEMA_VERSION


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    small = TRUE.replace(budget=600)
    return write_traces(tmp_path_factory.mktemp("runs"), small, Shape(1, 1), range(1))[0]


def damaged_copy(run: Path, where: Path) -> Path:
    """The run's trace with a wrong value, an unknown kind, a missing field, a cut last line."""
    lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    rollout = next(i for i, line in enumerate(lines) if line.startswith('{"kind": "rollout"'))
    data = json.loads(lines[rollout])
    lines[rollout] = json.dumps({**data, "start": "soon"})
    lines[rollout + 1] = json.dumps({"kind": "gpu_sample", "start": 1.0, "end": 1.0})
    missing = json.loads(lines[rollout + 2])
    del missing["worker"]
    lines[rollout + 2] = json.dumps(missing)
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
    where.mkdir()
    (where / "trace.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return where


def test_damaged_trace_calibrates_from_the_rest_and_names_each_line(
    run: Path, tmp_path: Path
) -> None:
    damaged = damaged_copy(run, tmp_path / "damaged")
    out = tmp_path / "scenario.toml"
    result = run_pxn("calibrate", damaged, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "skipped 4 unusable line(s)" in result.stdout
    total = len((damaged / "trace.jsonl").read_text().splitlines())
    for message in (
        "field start has a bad value 'soon'",
        "unknown event kind 'gpu_sample'",
        "rollout event lacks field(s) worker",
        f"line {total}: truncated last line",
    ):
        assert message in result.stdout
    assert "run did not complete" in result.stdout  # its run_end was the cut line
    assert Scenario.load(out).workers == TRUE.workers


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"kind": "run_start", "schema": 4, "start": 0, "end": 0}\n', "schema version 4"),
        ('{"kind": "rollout", "start": 0, "end": 1}\n', "starts with a run_start"),
        ("", "holds no events"),
    ],
)
def test_unusable_trace_is_one_line_and_no_output(
    tmp_path: Path, content: str, fragment: str
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(content, encoding="utf-8")
    out = tmp_path / "scenario.toml"
    assert_user_error(run_pxn("calibrate", trace, "-o", out), fragment)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [trace]  # no partial file left behind either


def test_missing_paths_and_foreign_schema_beside_a_good_run(run: Path, tmp_path: Path) -> None:
    assert_user_error(run_pxn("calibrate", tmp_path / "nope", "-o", tmp_path / "s.toml"), "no such")
    assert_user_error(run_pxn("calibrate", tmp_path, "-o", tmp_path / "s.toml"), "without a trace")
    newer = tmp_path / "newer"
    newer.mkdir()
    text = (run / "trace.jsonl").read_text(encoding="utf-8")
    assert f'"schema": {SCHEMA_VERSION}' in text
    newer_text = text.replace(f'"schema": {SCHEMA_VERSION}', f'"schema": {SCHEMA_VERSION + 1}', 1)
    (newer / "trace.jsonl").write_text(newer_text)
    result = run_pxn("calibrate", run, newer, "-o", tmp_path / "s.toml")
    assert result.returncode == 0, result.stderr
    assert "set aside:" in result.stdout
    assert f"schema version {SCHEMA_VERSION + 1}" in result.stdout
    assert "calibrated from 1 trace(s)" in result.stdout


def test_run_start_with_a_bad_value_is_unusable(run: Path, tmp_path: Path) -> None:
    lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["workers"] = "eight"
    lines[0] = json.dumps(header)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines), encoding="utf-8")
    assert_user_error(run_pxn("calibrate", trace, "-o", tmp_path / "s.toml"), "line 1", "workers")


def test_a_trace_with_no_proposals_says_what_is_missing(run: Path, tmp_path: Path) -> None:
    lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    seed_only = [line for line in lines if '"iteration": 0' in line or "run_start" in line]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(seed_only), encoding="utf-8")
    assert_user_error(
        run_pxn("calibrate", trace, "-o", tmp_path / "s.toml"), "no reflection events"
    )


def test_unknown_latency_choice(run: Path, tmp_path: Path) -> None:
    result = run_pxn("calibrate", run, "-o", tmp_path / "s.toml", "--latency", "normal")
    assert_user_error(result, "latency choice", "normal")


def test_the_console_script_itself_exits_2_with_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"kind": "run_start", "schema": 9, "start": 0, "end": 0}\n')
    result = run_pxn_script("calibrate", trace, "-o", tmp_path / "s.toml")
    assert_user_error(result, "schema version 9")


def test_run_start_lacking_a_field_is_named_at_its_own_line(run: Path, tmp_path: Path) -> None:
    lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    del header["budget"]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join([json.dumps(header), *lines[1:]]), encoding="utf-8")
    result = run_pxn("calibrate", trace, "-o", tmp_path / "s.toml")
    assert_user_error(result, "line 1", "run_start event lacks field(s) budget")


def test_binary_file_and_a_line_that_is_not_an_object(run: Path, tmp_path: Path) -> None:
    binary = tmp_path / "figure.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    assert_user_error(run_pxn("calibrate", binary, "-o", tmp_path / "s.toml"), "not a text file")
    lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    odd = tmp_path / "odd.jsonl"
    odd.write_text("\n".join([lines[0], '"just a string"', *lines[1:]]), encoding="utf-8")
    # A line that is JSON but not an event is damaged like any other: skipped, named, and
    # calibration goes on from the rest.
    result = run_pxn("calibrate", odd, "-o", tmp_path / "s.toml")
    assert result.returncode == 0, result.stderr
    assert "line 2: not a JSON object" in result.stdout + result.stderr
    assert (tmp_path / "s.toml").exists()
