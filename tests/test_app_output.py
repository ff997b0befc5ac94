"""One output helper: formats, strict JSON, tables that fit, output paths checked first,
files written whole with the user's umask, a reader that stops reading (`| head`), and the
numbers the tables show."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import PXN, assert_user_error, run_pxn, run_pxn_script
from rich.console import Console
from sim_helpers import make_scenario

from pxn.api.prediction_report import predictions_report, predictions_table, stage_table
from pxn.api.report import json_text
from pxn.api.tables import Column, Grid, fit
from pxn.errors import PxnError
from pxn.files import write_text_atomically
from pxn.scenario import Scenario, Uncertainty
from pxn.shape import Shape, parse_shapes
from pxn.sim.predict import sweep
from pxn.sim.presets import load_scenario

ROOT = Path(__file__).resolve().parents[1]
PRICED_AND_LIMITED = ROOT / "experiments" / "advise_example" / "livebench-math-api.toml"
BOX = "┏┃┡│└"  # how a table's lines start (its title and caption are centred text)


def render(renderable, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in BOX]


def strict_json(text: str):
    """JSON as the standard has it: no NaN, no Infinity."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


def saved(scenario: Scenario, tmp_path: Path) -> Path:
    path = tmp_path / f"{scenario.name}.toml"
    scenario.save(path)
    return path


# -- --format, and JSON that is JSON ---------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "hover"],
        ["sweep", "hover"],
        ["advise", "hover", "--budget", "3000"],
        ["validate", "runs/none", "--scenario", "hover"],
    ],
    ids=["simulate", "sweep", "advise", "validate"],
)
def test_every_command_checks_its_format_before_any_work(args: list[str]) -> None:
    assert_user_error(
        run_pxn(*args, "--format", "yaml"), "pxn: error: --format is table, csv or json: got 'yaml'"
    )


def test_json_is_strict_when_a_figure_is_undefined() -> None:
    document = {"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf, "e": "x"}}
    expected = {"a": None, "b": [None, 1.5], "c": {"d": None, "e": "x"}}
    assert strict_json(json_text(document)) == expected


def test_a_budget_of_one_seed_validation_gives_strict_json(tmp_path: Path) -> None:
    # No iteration runs: the case that once put a NaN in `sweep --format json`.
    path = saved(make_scenario(budget=20), tmp_path)
    for command, more in (("sweep", ["--out", tmp_path]), ("simulate", ["--shape", "2x2"])):
        result = run_pxn(command, path, "--reps", "3", "--format", "json", *more)
        assert result.returncode == 0, result.stderr
        assert strict_json(result.stdout)["predictions"][-1]["iterations"]["mean"] == 0
    strict_json((tmp_path / "sweep.json").read_text(encoding="utf-8"))


# -- tables that fit ---------------------------------------------------------------


@pytest.fixture(scope="module")
def priced_and_limited() -> tuple[Scenario, list]:
    scenario = load_scenario(str(PRICED_AND_LIMITED)).replace(budget=600)
    return scenario, sweep(scenario, parse_shapes("single,2x2,4x4"), 4)


@pytest.fixture(scope="module")
def hover() -> tuple[Scenario, list]:
    # The preset without its parameter draws: these tests are about the columns.
    scenario = load_scenario("hover").replace(uncertainty=None)
    return scenario, sweep(scenario, parse_shapes("single,2x1,2x2,8x2"), 4)


def cells_of(grid: Grid, names: list[str]) -> Iterator[str]:
    index = [i for i, c in enumerate(grid.columns) if c.name in names]
    for row in grid.rows:
        yield from (row[i] for i in index)


@pytest.mark.parametrize("which", ["hover", "priced_and_limited"])
@pytest.mark.parametrize("width", [100, 80, 60])
def test_a_table_fits_its_terminal_and_cuts_no_number(
    which: str, width: int, request: pytest.FixtureRequest
) -> None:
    scenario, predictions = request.getfixturevalue(which)
    grid = predictions_table(scenario, predictions)
    fitted = fit(grid, Console(width=width))
    text = render(fitted, width)
    assert max(map(len, text.splitlines())) <= width
    assert "…" not in text
    # Every cell of the columns always shown is there whole.
    for cell in cells_of(grid, ["shape", "wall-clock", "5-95%", "speedup", "dollars"]):
        assert cell in text
    dropped = len(grid.columns) - len(getattr(fitted, "columns", []))
    assert ("--wide adds: " in text.replace("\n", " ")) == (dropped > 0)


def test_wide_shows_every_column_however_wide(priced_and_limited) -> None:
    scenario, predictions = priced_and_limited
    grid = predictions_table(scenario, predictions)
    text = render(fit(grid, Console(width=100), wide=True), 300)
    header = "".join(table_lines(text)[:4])
    for column in grid.columns:
        for word in column.name.split("\n"):
            assert word in header
    assert max(map(len, text.splitlines())) > 100
    assert "--wide adds" not in text


def test_a_terminal_too_narrow_for_any_table_gets_a_line_per_row(hover) -> None:
    scenario, predictions = hover
    grid = predictions_table(scenario, predictions)
    text = render(fit(grid, Console(width=40)), 40)
    assert table_lines(text) == []
    assert "…" not in text
    for p in predictions:
        assert f"{p.shape.label}: wall-clock " in text.replace("\n", " ")


def test_tables_fit_through_the_console_script_at_80_columns() -> None:
    result = run_pxn_script(
        "sweep", "hover", "--shapes", "single,2x2", "--reps", "4", env={"COLUMNS": "80"}
    )
    assert result.returncode == 0, result.stderr
    assert max(map(len, result.stdout.splitlines())) <= 80
    assert "…" not in result.stdout and "--wide adds: " in result.stdout


def test_a_grid_printed_as_it_is_is_whole_and_refuses_ragged_rows() -> None:
    grid = Grid("t", [Column("a", left=True), Column("b", rank=1)])
    grid.add_row("x", "12.5")
    assert "12.5" in render(grid, 100) and len(grid.rows) == 1
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        grid.add_row("y")


# -- the numbers the tables show ---------------------------------------------------


def test_the_analytic_speedup_is_the_ratio_of_the_analytic_column(hover) -> None:
    scenario, predictions = hover
    assert predictions[0].shape == Shape(1, 1)
    single = predictions[0].analytic.wall_clock  # at single's own (simulated) acceptance
    report = predictions_report(scenario, predictions)
    [grid] = report.shown
    column = [c.name for c in grid.columns].index("analytic\nspeedup")
    for p, row, record, document in zip(
        predictions, grid.rows, report.rows, report.document["predictions"], strict=True
    ):
        ratio = single / p.analytic.wall_clock
        assert row[column] == f"{ratio:.2f}x"
        assert record["analytic_speedup"] == document["analytic"]["speedup"] == ratio
        # The paper's own formula stays, under its name.
        assert record["analytic_paper_ratio"] == document["analytic"]["paper_ratio"]
        assert document["analytic"]["paper_ratio"] == p.analytic.speedup
    two_by_two = predictions[2]
    assert two_by_two.shape == Shape(2, 2)
    assert abs(two_by_two.analytic.speedup - single / two_by_two.analytic.wall_clock) > 0.1


def test_the_stage_table_never_shows_minus_zero(hover) -> None:
    _, predictions = hover
    p = predictions[0]
    # The overhead is what the stages leave of the wall-clock: float noise makes it -1e-14.
    noisy = replace(p, stage_time={**p.stage_time, "overhead": -6.1e-14})
    text = render(stage_table(noisy), 100)
    assert "overhead" in text and "-0" not in text
    assert "│ overhead         │     0.0 s │  0.0% │" in text


# -- output paths, checked before the work; files whole, with the umask ------------


def test_an_out_that_cannot_be_a_directory_fails_before_the_sweep(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    assert_user_error(
        run_pxn("sweep", "hover", "--out", blocker / "out"),
        f"--out {blocker / 'out'} cannot be created: {blocker} is a file",
    )
    assert_user_error(
        run_pxn("advise", "hover", "--budget", "3000", "--out", blocker),
        f"--out {blocker} is a file, not a directory",
    )


def test_file_outputs_are_checked_before_the_work(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text("", encoding="utf-8")
    assert_user_error(
        run_pxn("trace", "export", trace, "--chrome", tmp_path),
        f"--chrome {tmp_path} is a directory, not a file",
    )
    assert_user_error(
        run_pxn("plot", "timeline", trace, "-o", trace / "x.png"),
        f"output {trace / 'x.png'} cannot be created: {trace} is a file",
    )


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_written_files_follow_the_umask(tmp_path: Path, mask: int) -> None:
    previous = os.umask(mask)
    try:
        path = write_text_atomically(tmp_path / "x.csv", "a,b\n")
        opened = tmp_path / "opened.txt"
        opened.write_text("", encoding="utf-8")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(opened.stat().st_mode)
    assert path.read_text(encoding="utf-8") == "a,b\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_sweep_out_files_share_one_mode(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_pxn("sweep", scenario_file, "--shapes", "single,2x2", "--reps", "3", "--out", out)
    assert result.returncode == 0, result.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert sorted(modes) == ["sweep.csv", "sweep.json", "sweep.png"]
    assert len(set(modes.values())) == 1, modes
    rows = list(csv.DictReader((out / "sweep.csv").open(encoding="utf-8")))
    assert [row["shape"] for row in rows] == ["single", "2x2"]


def test_a_file_the_system_will_not_write_is_one_line_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("kept", encoding="utf-8")
    with pytest.raises(PxnError, match=f"^cannot write {blocker / 'x.csv'}: "):
        write_text_atomically(blocker / "x.csv", "a,b\n")
    assert blocker.read_text(encoding="utf-8") == "kept"


# -- a reader that stops reading (`pxn ... | head`) costs output, never work ----------


def run_to_a_gone_reader(*args: str | Path, stderr_too: bool = False) -> tuple[int, str]:
    """`pxn ARGS` whose stdout reader (and stderr's, when `stderr_too`) has gone before
    the first line: every write meets a broken pipe. Its exit code and what it wrote on
    stderr."""
    done = subprocess.Popen(
        [str(PXN), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    done.stdout.close()
    if stderr_too:
        done.stderr.close()
        return done.wait(timeout=300), ""
    err = done.stderr.read().decode()
    return done.wait(timeout=300), err


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from calibrate_helpers import write_traces

    root = tmp_path_factory.mktemp("runs")
    return write_traces(root, make_scenario(budget=200), Shape(1, 1), range(2))


def test_calibrate_into_a_closed_pipe_still_writes_its_scenario(
    two_runs: list[Path], tmp_path: Path
) -> None:
    # It once exited 1 at the first line printed, before the scenario was written.
    out = tmp_path / "s.toml"
    code, err = run_to_a_gone_reader("calibrate", *two_runs, "-o", out)
    assert (code, err) == (0, "")  # quietly: no traceback, no "Exception ignored"
    assert Scenario.load(out).name == "calibrated"


@pytest.mark.slow  # six figures drawn: seconds
def test_work_after_the_reader_has_gone_is_done(two_runs: list[Path], tmp_path: Path) -> None:
    # The figures come after the report is printed: a reader gone does not stop them.
    out, plots = tmp_path / "s.toml", tmp_path / "plots"
    code, _ = run_to_a_gone_reader("calibrate", *two_runs, "-o", out, "--plots", plots,
                                   stderr_too=True)  # fmt: skip
    assert code == 0 and out.is_file()
    assert (plots / "fit_rollout.png").stat().st_size > 0


def test_an_error_to_a_gone_reader_keeps_its_exit_code(tmp_path: Path) -> None:
    code, err = run_to_a_gone_reader("simulate", tmp_path / "absent.toml")
    assert code == 2 and err.startswith("pxn: error: ") and err.count("\n") == 1


# -- advise: the report text lives in the report -----------------------------------


def test_advise_prints_its_recommendation_and_a_table_that_fits(tmp_path: Path) -> None:
    path = saved(make_scenario(), tmp_path)
    result = run_pxn("advise", path, "--budget", "400", "--p", "1..2", "--n", "1..2", "--reps", "4")
    assert result.returncode == 0, result.stderr
    assert "\nrecommended: " in result.stdout
    lines = table_lines(result.stdout)
    assert len(lines) >= 4 + 4  # the box and the four allocations
    # the prose too (the caveat, the recommendation) is wrapped, not one long line
    assert max(map(len, result.stdout.splitlines())) <= 100


def test_advise_refused_from_bounds_shows_no_work_and_no_ranking_note() -> None:
    """Nothing is simulated: no progress line announces replicates, and the note on how
    allocations are ranked has no ranking to speak of."""
    args = ["advise", "livebench-math", "--budget", "5000", "--deadline", "5m"]
    result = run_pxn(*args, "--workers", "4")
    assert result.returncode == 1, result.stderr
    assert "refused from bounds alone" in result.stdout
    assert "strong-scaling bound" in result.stderr
    assert "replicates" not in result.stderr and "Scores are" not in result.stdout


# -- parameter uncertainty, shown compactly ----------------------------------------


def with_rollout_draws(scenario: Scenario, factors: list[float]) -> Scenario:
    scale = scenario.rollout.params["scale"]
    draws = tuple({"rollout.scale": scale * f} for f in factors)
    return scenario.replace(uncertainty=Uncertainty("test", draws))


def test_a_prediction_over_draws_shows_the_parameters_share_and_notes_too_few(
    tmp_path: Path,
) -> None:
    scenario = with_rollout_draws(make_scenario(), [0.5, 0.8, 1.25, 2.0])
    predictions = sweep(scenario, parse_shapes("single,2x2"), 8)  # two replicates per draw
    report = predictions_report(scenario, predictions)
    [grid] = report.shown
    assert "4 parameter draws" in grid.title
    names = [c.name for c in grid.columns]
    for p, row, record in zip(predictions, grid.rows, report.rows, strict=True):
        share = p.wall_clock_split.parameter_share
        assert row[names.index("params")] == f"{share:.0%}"
        assert record["wall_clock_parameter_share"] == share and record["draws"] == 4
        assert record["wall_clock_noise_p5_s"] == p.wall_clock_split.noise.low
    # Too few replicates for the draws: the note is said once, after the table.
    result = run_pxn("sweep", saved(scenario, tmp_path), "--shapes", "single,2x2", "--reps", "4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("note: 4 replicates ran each of the scenario's 4") == 1
    assert "│      - │" in result.stdout  # no draw ran twice: no split to show


def test_without_draws_nothing_is_said_of_them(hover) -> None:
    scenario, predictions = hover
    report = predictions_report(scenario, predictions)
    [grid] = report.shown
    assert "params" not in [c.name for c in grid.columns] and "draws" not in grid.title
    assert report.rows[0]["draws"] == 0 and report.rows[0]["wall_clock_parameter_share"] is None


def test_validate_shows_each_runs_percentile_and_the_verdict(tmp_path: Path) -> None:
    from calibrate_helpers import write_traces

    scenario = make_scenario(budget=200)
    runs = write_traces(tmp_path / "runs", scenario, Shape(1, 1), range(2))
    path = saved(scenario, tmp_path)
    table = run_pxn("validate", *runs, "--scenario", path, "--reps", "10", "--jobs", "1")
    assert table.returncode == 0, table.stderr
    assert "pct." in table.stdout and "runs inside the 5-95% interval" in table.stdout
    rows = run_pxn("validate", *runs, "--scenario", path, "--reps", "10", "--format", "csv")
    percentiles = [float(r["percentile"]) for r in csv.DictReader(io.StringIO(rows.stdout))]
    assert len(percentiles) == 2 and all(0 <= x <= 1 for x in percentiles)
    for p in percentiles:
        assert f"{p:.2f}" in table.stdout
