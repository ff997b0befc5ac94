"""A calibrated scenario set beside the very runs it was fitted to: it reproduces them, or says
so in its first line (and `--strict` refuses to write it)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from calibrate_helpers import TRUE, write_traces
from conftest import run_pxn

from pxn.api import calibrate
from pxn.calibrate.reproduction import FIGURES, reproduce
from pxn.shape import Shape
from pxn.trace_reading import read_one

MESSY = Path(__file__).resolve().parents[1] / "experiments" / "messy_runs" / "runs"


def test_runs_of_one_scenario_are_reproduced_figure_by_figure(tmp_path):
    paths = write_traces(tmp_path, TRUE.replace(budget=600), Shape(2, 2), range(3))
    traces = [read_one(p) for p in paths]
    reproduction = reproduce(TRUE.replace(budget=600), traces, replicates=100)
    # Acceptance rates: every figure but the scores, for each run.
    assert len(reproduction.checks) == 3 * (len(FIGURES) - 2)
    assert reproduction.holds and not reproduction.gross
    assert reproduction.lines()[0].startswith("reproduces its own runs")


def test_a_scenario_that_cannot_reproduce_its_runs_says_so_first_and_strict_refuses(tmp_path):
    """Two runs of one workload, one with rollouts thirty times slower, at two shapes (so no
    run spread can be fitted, and its draws come from the prior, widened for two lone runs):
    the scenario between them reproduces neither's wall-clock."""
    fast = write_traces(tmp_path / "fast", TRUE.replace(budget=600), Shape(1, 1), range(1))
    slow_truth = TRUE.replace(budget=600, rollout=replace(TRUE.rollout, params={"a": 3.0,
                              "scale": 21.0}))  # fmt: skip
    slow = write_traces(tmp_path / "slow", slow_truth, Shape(2, 2), range(1))
    out = tmp_path / "both.toml"
    refused = run_pxn("calibrate", *fast, *slow, "-o", out, "--draws", "20", "--strict")
    assert refused.returncode == 1, refused.stderr
    assert not out.exists()
    first = refused.stdout.splitlines()[0]
    assert first.startswith("DOES NOT REPRODUCE ITS OWN RUNS"), refused.stdout
    assert "wall-clock" in refused.stdout and "gross" in refused.stdout
    assert "not written" in refused.stderr

    written = run_pxn("calibrate", *fast, *slow, "-o", out, "--draws", "20", "--format", "json")
    assert written.returncode == 0, written.stderr
    document = json.loads(written.stdout)
    assert document["reproduction"]["holds"] is False
    missed = [c for c in document["reproduction"]["checks"] if not c["inside"]]
    assert {c["figure"] for c in missed} >= {"wall-clock"}
    header = out.read_text().splitlines()
    assert any("DOES NOT REPRODUCE" in line for line in header[:4])


def test_a_run_cut_short_is_named_not_simulated(tmp_path):
    paths = write_traces(tmp_path, TRUE.replace(budget=400), Shape(1, 1), range(2))
    cut = paths[1] / "trace.jsonl"
    cut.write_text("".join(cut.read_text().splitlines(keepends=True)[:-1]))  # no run_end
    reproduction = reproduce(TRUE.replace(budget=400), [read_one(p) for p in paths], 50)
    assert {c.run for c in reproduction.checks} == {paths[0].name}
    assert any("not completed" in line for line in reproduction.lines())


@pytest.mark.slow
def test_runs_whose_scores_fit_no_quality_model_say_so_in_the_first_lines():
    """The messy-run study's guess-check singles: ten iterations of near-zero scores, too
    few for the inference to converge. The scenario keeps acceptance rates, and the
    report's first paragraph says it predicts no score, and why."""
    runs = [MESSY / "check-single-1", MESSY / "check-single-2"]
    result = calibrate(runs, draws=20)
    assert result.scenario.quality is None and result.scenario.acceptance is not None
    assert result.lines[1].startswith("no score predictions: the quality model could not be")
    assert "did not converge" in result.lines[1]
    assert result.header.splitlines()[3] == result.lines[1]
