"""pxn.api: each function returns a typed result with the same numbers the command prints for
the same seed, the command's defaults, its table as text and HTML, a figure, a frame's
columns, progress only when asked, and bad input as PxnError in the domain's words."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

import pytest
import typer
from conftest import run_pxn
from matplotlib.figure import Figure
from rich.console import Console

from pxn.api import (
    AdviseResult,
    CalibrateResult,
    SimulateResult,
    SweepResult,
    advise,
    calibrate,
    simulate,
    sweep,
)
from pxn.api.plots import save_figure
from pxn.api.report import PANDAS_MISSING, json_text
from pxn.api.tables import MAX_WIDTH
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.advise import Assessment
from pxn.sim.predict import Prediction
from pxn.sim.presets import load_scenario

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "experiments" / "recording" / "runs"
TRACES = [RECORDED / "single", RECORDED / "2x2"]
SUMMARIES = ROOT / "experiments" / "paper" / "hover.summaries.toml"
HAS_PANDAS = importlib.util.find_spec("pandas") is not None


def printed_json(*args: str | Path) -> dict:
    done = run_pxn(*args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def as_printed(result) -> dict:
    return json.loads(json_text(result.report().document))


@pytest.fixture(scope="module")
def swept() -> SweepResult:
    return sweep("hover", shapes="single,2x2", reps=8, seed=3, jobs=1)


@pytest.fixture(scope="module")
def advised() -> AdviseResult:
    return advise("hover", budget=3000, p="1..2", n="1..2", reps=6, seed=2, jobs=1)


@pytest.fixture(scope="module")
def calibrated() -> CalibrateResult:
    return calibrate(TRACES, name="recording", draws=0)


# -- the same numbers as the command, typed ---------------------------------------------


def test_simulate_gives_what_pxn_simulate_prints() -> None:
    result = simulate("hover", shape="2x2", reps=6, seed=4, workers=32)
    assert isinstance(result, SimulateResult) and isinstance(result.prediction, Prediction)
    assert result.prediction.shape == Shape(2, 2) and result.scenario.workers == 32
    args = ["simulate", "hover", "--shape", "2x2", "--reps", "6", "--seed", "4", "--workers", "32"]
    assert as_printed(result) == printed_json(*args)


def test_sweep_gives_what_pxn_sweep_prints(swept: SweepResult) -> None:
    assert isinstance(swept, SweepResult) and isinstance(swept.scenario, Scenario)
    assert [p.shape.label for p in swept.predictions] == ["single", "2x2"]
    args = ["sweep", "hover", "--shapes", "single,2x2", "--reps", "8", "--seed", "3", "--jobs", "1"]
    assert as_printed(swept) == printed_json(*args)


def test_shapes_and_scenarios_come_in_any_form_the_same() -> None:
    hover = load_scenario("hover")
    as_list = sweep(hover, shapes=[Shape(1, 1), "2x2"], reps=4, seed=3, jobs=1)
    as_path = sweep(ROOT / "sim" / "presets" / "hover.toml", shapes="single,2x2", reps=4, seed=3)
    assert as_list.predictions == as_path.predictions


def test_advise_gives_what_pxn_advise_prints(advised: AdviseResult) -> None:
    assert isinstance(advised.recommended, Assessment)
    assert advised.recommended is advised.advice.recommended and advised.reasons == []
    args = ["advise", "hover", "--budget", "3000", "--p", "1..2", "--n", "1..2", "--reps", "6"]
    assert as_printed(advised) == printed_json(*args, "--seed", "2", "--jobs", "1")


def test_advise_takes_numbers_as_well_as_text() -> None:
    asked = advise("hover", budget=3000, p=[1, 2], n=1, minibatch=3, workers=(64,), reps=4)
    assert (asked.advice.ask.p, asked.advice.ask.n, asked.advice.ask.b) == ((1, 2), (1,), (3,))
    assert asked.advice.ask.workers == (64,)


def test_calibrate_writes_what_pxn_calibrate_writes(
    calibrated: CalibrateResult, tmp_path: Path
) -> None:
    assert isinstance(calibrated.scenario, Scenario) and calibrated.scenario.name == "recording"
    mine = calibrated.save(tmp_path / "api.toml")
    theirs = tmp_path / "cli.toml"
    done = run_pxn("calibrate", *TRACES, "-o", theirs, "--name", "recording", "--draws", "0")
    assert done.returncode == 0, done.stderr
    assert mine.read_text(encoding="utf-8") == theirs.read_text(encoding="utf-8")
    assert done.stdout.splitlines() == [*calibrated.lines, f"wrote {theirs}"]
    assert Scenario.load(mine).to_dict() == calibrated.scenario.to_dict()


def test_each_result_is_frozen(swept: SweepResult) -> None:
    with pytest.raises(AttributeError):
        swept.predictions = ()  # type: ignore[misc]


# -- the command's defaults and options ---------------------------------------------------


@pytest.mark.parametrize(
    ("words", "function"),
    [("simulate", simulate), ("sweep", sweep), ("advise", advise), ("calibrate", calibrate)],
)
def test_the_api_takes_the_commands_options_with_its_defaults(words: str, function) -> None:
    from pxn.app.cli import app

    command = typer.main.get_command(app).commands[words]
    cli = {p.name: p.default for p in command.params}
    options = [
        p for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]  # fmt: skip
    assert sorted({p.name for p in options} - set(cli)) == ["progress"]  # the CLI's is on
    defaults = {p.name: p.default for p in options if p.default is not inspect.Parameter.empty}
    assert {name: cli[name] for name in defaults if name in cli} == {
        name: default for name, default in defaults.items() if name != "progress"
    }


# -- what a notebook shows ----------------------------------------------------------------


def test_str_and_html_are_the_table_the_command_prints(
    swept: SweepResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command's stdout as in a pipe: MAX_WIDTH columns, whatever this terminal is.
    monkeypatch.setattr("pxn.app.output.stdout", Console(width=MAX_WIDTH))
    done = run_pxn("sweep", "hover", "--shapes", "single,2x2", "--reps", "8", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert str(swept) == done.stdout
    assert "│ 2x2 " in str(swept)
    html = swept._repr_html_()
    assert html.startswith("<table><caption>hover: B=3000 metric calls")
    # Every shape a row, every column of the table (a notebook scrolls: --wide's too).
    assert html.count("<tr>") == 1 + len(swept.predictions)
    assert html.count("<th ") == len(swept.report().shown[0].columns)
    assert "<p><b>note:</b>" in html  # the command's notes follow the table


def test_figures_are_the_ones_the_command_saves(
    swept: SweepResult, advised: AdviseResult, calibrated: CalibrateResult, tmp_path: Path
) -> None:
    figures = [
        swept.figure(),
        advised.figure(),
        calibrated.figure(),
        calibrated.figure("reflection"),
    ]
    assert all(isinstance(f, Figure) and f.axes for f in figures)
    args = ["sweep", "hover", "--shapes", "single,2x2", "--reps", "8", "--seed", "3"]
    assert run_pxn(*args, "--out", tmp_path / "cli").returncode == 0
    saved = save_figure(swept.figure(), tmp_path / "api.png")
    assert saved.read_bytes() == (tmp_path / "cli" / "sweep.png").read_bytes()
    assert "matplotlib.pyplot" not in sys.modules  # drawn without pyplot


def test_a_figure_of_nothing_drawn_is_refused() -> None:
    nothing = advise("hover", budget=3000, p=1, n=1, deadline="1s", reps=4)
    assert nothing.recommended is None and nothing.reasons
    with pytest.raises(PxnError, match="nothing was simulated"):
        nothing.figure()


def test_a_fit_not_made_is_refused_by_name(calibrated: CalibrateResult) -> None:
    with pytest.raises(PxnError) as raised:
        calibrated.figure("tokens")
    assert raised.value.subject == "fit" and "rollout, reflection" in str(raised.value)


def test_frames_need_pandas_and_say_how_to_get_it(
    swept: SweepResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError) as raised:
        swept.to_frame()
    assert str(raised.value) == PANDAS_MISSING and "pip install pandas" in PANDAS_MISSING


def test_a_frames_rows_are_the_csvs(
    swept: SweepResult, advised: AdviseResult, calibrated: CalibrateResult
) -> None:
    row = swept.rows()[1]
    assert row == swept.report().rows[1]  # one column scheme: the frame's is the CSV's
    assert row["shape"] == "2x2" and (row["p"], row["n"]) == (2, 2)
    wall = swept.predictions[1].wall_clock
    assert (row["wall_clock_mean_s"], row["wall_clock_p5_s"], row["wall_clock_p95_s"]) == (
        wall.mean,
        wall.low,
        wall.high,
    )
    assert row["analytic_wall_clock_s"] == swept.predictions[1].analytic.wall_clock
    assert row["stage_reflection_s"] == swept.predictions[1].stage_time["reflection"]
    # A figure that is None still has its columns: every row of a frame has the same ones.
    assert {"wall_clock_parameter_share", "wall_clock_noise_p5_s"} <= set(row)
    allocation = advised.rows()[0]
    chosen = advised.advice.assessments[0].allocation
    assert (allocation["p"], allocation["n"], allocation["b"], allocation["workers"]) == (
        chosen.p,
        chosen.n,
        chosen.b,
        chosen.workers,
    )
    assert "wall_clock_mean_s" in allocation and "wall_clock_se_s" in allocation
    assert calibrated.rows()[0]["name"] == "recording"
    if HAS_PANDAS:  # pxn does not install it: the frame itself only where it is
        frame = swept.to_frame()
        assert list(frame.columns) == list(row) and len(frame) == 2
        means = [p.wall_clock.mean for p in swept.predictions]
        assert frame["wall_clock_mean_s"].tolist() == means


def test_progress_is_shown_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    simulate("hover", reps=2, seed=1)
    assert capsys.readouterr().err == ""
    simulate("hover", reps=2, seed=1, progress=True)
    assert capsys.readouterr().err.startswith("simulating: 2 replicates (")


def test_a_trace_of_replicate_zero_is_written_once(tmp_path: Path) -> None:
    result = simulate("hover", shape="2x2", reps=2, seed=1, budget=400)
    path = result.write_trace(tmp_path / "sim" / "trace.jsonl")
    assert path.read_text(encoding="utf-8").count("\n") > 10
    with pytest.raises(PxnError) as raised:
        result.write_trace(path)
    assert raised.value.subject == "trace"


# -- bad input, in the domain's words -----------------------------------------------------


@pytest.mark.parametrize(
    ("call", "subject", "fragment"),
    [
        (lambda: simulate("no-such-preset"), None, "no scenario file or preset named"),
        (lambda: simulate("hover", shape="2y2"), "shape", "is 'PxN'"),
        (lambda: simulate("hover", seed=-1), "seed", "must be a whole number >= 0"),
        (lambda: sweep("hover", reps=1), "replicates", "must be >= 2"),
        (lambda: sweep("hover", shapes=["2x2", "2x2"]), "shapes", "name each shape once"),
        (lambda: sweep("hover", backend="spark"), "backend", "is local or ray"),
        (lambda: advise("hover", budget=3000, p="0..2"), "p", "is not a range"),
        (lambda: advise("hover", budget=3000, deadline="soon"), "deadline", "is a duration"),
        (lambda: advise("hover", budget=3000, objective="speed"), "objective", "or score"),
        (lambda: calibrate([]), None, "give trace files (or run directories), or a summaries"),
        (lambda: calibrate(TRACES, prefix_cache="maybe"), "prefix cache", "must be auto"),
        (lambda: calibrate(TRACES, name=" "), "name", "must not be empty"),
        (lambda: calibrate(TRACES, summaries=SUMMARIES), None, "not both"),
        (lambda: calibrate(summaries=SUMMARIES, latency="gamma"), "latency", "applies to traces"),
        (lambda: calibrate(summaries=SUMMARIES, lm_servers=2), "LM servers", "[inference]"),
    ],
)
def test_bad_input_is_a_pxn_error_in_domain_words(call, subject: str | None, fragment: str) -> None:
    with pytest.raises(PxnError) as raised:
        call()
    assert raised.value.subject == subject
    assert fragment in str(raised.value)
    assert "--" not in str(raised.value)  # no flag of the command: the caller gave none
