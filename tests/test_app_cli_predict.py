"""`pxn simulate`, `sweep` and `presets`: exit codes, one-line errors, and their outputs.

In this process through pxn.app.cli.main (conftest.run_pxn); the first test runs
the real console script, to keep that path honest.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from conftest import assert_user_error, run_pxn, run_pxn_script


def test_sweep_writes_csv_json_and_figure_through_the_console_script(
    scenario_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    shapes = ["single", "2x2", "4x1"]
    result = run_pxn_script(
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
    assert [p["shape"] for p in data["predictions"]] == shapes
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out / 'sweep.png'}, {out / 'sweep.csv'}, {out / 'sweep.json'}" in result.stderr


def test_bad_shape_is_one_line_and_exit_2() -> None:
    assert_user_error(
        run_pxn("simulate", "hover", "--shape", "2x0"), "--shape needs P, N >= 1 (P x N): got '2x0'"
    )


def test_unknown_preset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert_user_error(run_pxn("simulate", "no-such-preset"), "no-such-preset", "livebench-math")


def simulated_budget(*args: str) -> int:
    ran = run_pxn("simulate", *args, "--reps", "2", "--format", "json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)["scenario"]["budget"]


def test_a_preset_is_found_past_a_directory_of_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario_file: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hover").mkdir()
    (tmp_path / "other").mkdir()
    assert simulated_budget("hover") == 3000  # the preset's, not "Is a directory"
    assert_user_error(run_pxn("simulate", "other"), "cannot read scenario other: Is a directory")
    # A file of a preset's name is the file (budget 200), read before the preset.
    (tmp_path / "file").mkdir()
    monkeypatch.chdir(tmp_path / "file")
    scenario_file.rename(tmp_path / "file" / "hover")
    assert simulated_budget("hover") == 200


def test_bad_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = = 3\n", encoding="utf-8")
    assert_user_error(run_pxn("sweep", bad, "--reps", "5"), "not valid TOML")


def test_invalid_scenario_value(scenario_file: Path) -> None:
    text = scenario_file.read_text().replace("budget = 200", "budget = 5")
    scenario_file.write_text(text, encoding="utf-8")
    assert_user_error(run_pxn("simulate", scenario_file), "budget 5 is smaller than one seed")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sweep", "--shapes", "single,3x"], "--shapes is 'PxN'"),
        (["simulate", "--budget", "10"], "--budget 10 is smaller than one seed validation"),
        (["simulate", "--workers", "0"], "--workers must be a whole number >= 1: got 0"),
        (["simulate", "--reps", "1"], "--reps must be >= 2 to give an interval: got 1"),
        (["sweep", "--jobs", "0"], "--jobs must be >= 1: got 0"),
    ],
    ids=["bad shape list", "budget override", "workers override", "one replicate", "no jobs"],
)
def test_bad_overrides_are_one_line_naming_the_flag(
    args: list[str], fragment: str, scenario_file: Path
) -> None:
    command, *flags = args
    assert_user_error(run_pxn(command, scenario_file, *flags), fragment)


def test_bad_flag_value_is_a_usage_error_not_a_traceback(scenario_file: Path) -> None:
    result = run_pxn("sweep", scenario_file, "--reps", "many")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_same_seed_same_output_different_seed_different(scenario_file: Path) -> None:
    def run(seed: str, jobs: str) -> str:
        result = run_pxn(
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
    result = run_pxn("simulate", scenario_file, "--shape", "2x2", "--reps", "5", "--trace", trace)
    assert result.returncode == 0, result.stderr
    assert "2x2" in result.stdout
    assert f"wrote replicate 0 as a trace: {trace}" in result.stderr
    written = trace.read_bytes()
    assert written.startswith(b'{"kind": "run_start"')
    again = run_pxn("simulate", scenario_file, "--shape", "2x2", "--reps", "5", "--trace", trace)
    assert_user_error(again, f"--trace {trace} already exists")
    assert trace.read_bytes() == written


def test_simulate_prints_the_shape_and_its_stages() -> None:
    result = run_pxn("simulate", "hover", "--shape", "2x2", "--reps", "4")
    assert result.returncode == 0, result.stderr
    assert "2x2" in result.stdout and "time per stage, 2x2" in result.stdout
    for stage in ("seed_val", "parent_minibatch", "reflection", "full_val", "overhead"):
        assert stage in result.stdout


@pytest.mark.parametrize("output_format", ["csv", "json"])
def test_simulate_speaks_csv_and_json(scenario_file: Path, output_format: str) -> None:
    result = run_pxn(
        "simulate", scenario_file, "--shape", "2x2", "--reps", "5", "--format", output_format
    )
    assert result.returncode == 0, result.stderr
    if output_format == "csv":
        [row] = csv.DictReader(io.StringIO(result.stdout))
        assert row["shape"] == "2x2" and int(row["replicates"]) == 5
    else:
        [prediction] = json.loads(result.stdout)["predictions"]
        assert prediction["shape"] == "2x2" and prediction["replicates"] == 5


def test_presets_lists_each_preset_with_its_description() -> None:
    result = run_pxn("presets")
    assert result.returncode == 0, result.stderr
    for name in ("hover", "livebench-math"):
        assert f"{name}: " in result.stdout and f"│ {name}" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_the_title_names_a_local_pool_only_when_there_is_one() -> None:
    from sim_helpers import make_scenario, with_local_pool

    from pxn.api.prediction_report import predictions_table
    from pxn.shape import Shape
    from pxn.sim.predict import sweep

    plain = make_scenario()
    pooled = with_local_pool(plain, 2, 0.4)
    titles = [predictions_table(s, sweep(s, [Shape(1, 1)], 2)).title for s in (plain, pooled)]
    assert "LM server" not in titles[0] and "slowdown" not in titles[0]
    assert "W=8, 2 LM server(s), load slowdown 0.4, 2 replicates" in titles[1]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["sweep", "--budget", "1000000000000"], ["this sweep would take ~", "fewer replicates"]),
        (["sweep", "--shapes", "100000x100000"], ["this sweep would need ~", "of memory"]),
        (["simulate", "--reps", "1000000000"], ["would need ~", "of memory"]),
        (
            ["advise", "--budget", "1000000000000"],
            ["this search would take ~", "narrow the P, N, b or W"],
        ),
        (
            ["advise", "--budget", "3000", "--p", "1..1000", "--n", "1..1000"],
            ["holds 1,000,000 allocations", "narrow the ranges"],
        ),
    ],
    ids=["budget", "shape", "replicates", "advise budget", "advise grid"],
)
def test_absurd_work_is_refused_up_front_with_what_it_would_need(
    args: list[str], fragments: list[str], scenario_file: Path, tmp_path: Path
) -> None:
    command, *flags = args
    out = ["--out", str(tmp_path / "out")] if command != "simulate" else []
    assert_user_error(run_pxn(command, scenario_file, *flags, *out), *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["simulate", "sweep", "advise"])
def test_a_negative_seed_is_one_line(command: str, scenario_file: Path) -> None:
    budget = ["--budget", "300"] if command == "advise" else []
    result = run_pxn(command, scenario_file, "--seed", "-1", *budget)
    assert_user_error(result, "--seed must be a whole number >= 0: got -1")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sweep", "--out", "/proc/pxn-out"], "--out /proc/pxn-out cannot be written"),
        (["simulate", "--trace", "/proc/pxn.jsonl"], "--trace /proc/pxn.jsonl cannot be written"),
        (["advise", "--budget", "300", "--out", "/proc/x"], "--out /proc/x cannot be written"),
    ],
    ids=["sweep out", "simulate trace", "advise out"],
)
def test_an_output_path_nothing_can_be_written_to_is_refused_before_the_work(
    args: list[str], fragment: str, scenario_file: Path
) -> None:
    # /proc takes no new file, even from root, whose permission bits allow everything.
    command, *flags = args
    assert_user_error(run_pxn(command, scenario_file, *flags), fragment)
