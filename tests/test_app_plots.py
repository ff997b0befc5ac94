"""The calibration and validation figures render whole, from measured-like traces."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from calibrate_helpers import TRUE, write_traces
from conftest import run_pxn

from pxn.api.fit_plot import latency_fit_figure, latency_scale
from pxn.api.plots import save_figure, sweep_vs_measured_figure, time_unit, validation_columns
from pxn.api.timeline_plot import timeline_figure
from pxn.calibrate.traces.fit import fit_latency
from pxn.checks.validate import validate_runs
from pxn.shape import Shape
from pxn.trace import Rollout
from pxn.trace_reading import read_one

SMALL = TRUE.replace(budget=400)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [p for s in (Shape(1, 1), Shape(2, 2)) for p in write_traces(root, SMALL, s, range(2))]


def assert_png(path: Path, min_width: int = 600) -> None:
    image = matplotlib.image.imread(path)
    assert image.shape[1] >= min_width and image.shape[0] >= 300
    assert image.std() > 0.01  # something was drawn
    assert not list(path.parent.glob(".*partial*"))


def test_fit_diagnostics(runs: list[Path], tmp_path: Path) -> None:
    fit = fit_latency("rollout", [r.duration for r in read_one(runs[0]).of(Rollout)])
    assert_png(save_figure(latency_fit_figure(fit), tmp_path / "fit.png"))
    few = fit_latency("reflection", [1.0, 2.0, 3.5])  # no family: the Q-Q panel says so
    assert_png(save_figure(latency_fit_figure(few), tmp_path / "few.png"))


def test_a_heavy_tail_gets_a_log_axis(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    heavy = rng.lognormal(0.0, 1.6, size=300)  # max / median about 150
    assert latency_scale(heavy) == "log"
    assert latency_scale(rng.gamma(3.0, 0.7, size=300)) == "linear"
    assert_png(
        save_figure(latency_fit_figure(fit_latency("rollout", heavy)), tmp_path / "heavy.png")
    )


def test_timeline_whole_and_zoomed(runs: list[Path], tmp_path: Path) -> None:
    trace = read_one(runs[2])
    assert_png(save_figure(timeline_figure(trace), tmp_path / "all.png"))
    assert_png(save_figure(timeline_figure(trace, until_iteration=3), tmp_path / "first.png"))


def test_sweep_vs_measured_and_its_cli(runs: list[Path], tmp_path: Path) -> None:
    validation = validate_runs(SMALL, runs, replicates=20)
    assert_png(save_figure(sweep_vs_measured_figure(validation), tmp_path / "svm.png"))
    scenario = tmp_path / "s.toml"
    SMALL.save(scenario)
    out = tmp_path / "cli.png"
    result = run_pxn("plot", "sweep-vs-measured", *runs, "--scenario", scenario, "-o", out,
                 "--reps", "10", "--jobs", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_png(out)
    result = run_pxn("plot", "timeline", runs[0], "-o", tmp_path / "t.png", "--iterations", "2")
    assert result.returncode == 0, result.stderr
    assert_png(tmp_path / "t.png")


def test_a_run_slower_than_every_prediction_is_drawn_inside_the_axes(
    runs: list[Path], tmp_path: Path
) -> None:
    """Runs predicted by a scenario three times too fast sit above every band: the axis
    reaches them."""
    params = SMALL.rollout.params
    fast = SMALL.replace(rollout=replace(SMALL.rollout, params={**params, "scale": 0.7 / 3}))
    validation = validate_runs(fast, runs, replicates=10)
    figure = sweep_vs_measured_figure(validation)
    slowest = max(check.wall_clock for check in validation.checks)
    _, size = time_unit(slowest)
    assert figure.axes[0].get_ylim()[1] >= slowest / size
    assert_png(save_figure(figure, tmp_path / "slow.png"))


def test_calibrate_plots_option_writes_fit_diagnostics(runs: list[Path], tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    result = run_pxn("calibrate", *runs[:2], "-o", tmp_path / "s.toml", "--plots", plots)
    assert result.returncode == 0, result.stderr
    names = {p.name for p in plots.iterdir()}
    assert {"fit_rollout.png", "fit_reflection.png", "fit_rollout_full_val.png"} <= names
    for path in plots.iterdir():
        assert_png(path)


def test_runs_on_different_pools_get_columns_of_their_own(runs: list[Path], tmp_path: Path) -> None:
    """A run at another W was predicted on its own setup: it never shares a band with the
    runs of the same shape at the first W."""
    other = write_traces(tmp_path, SMALL.replace(workers=SMALL.workers * 2), Shape(2, 2), range(1))
    validation = validate_runs(SMALL, [*runs, *other], replicates=10)
    columns = validation_columns(validation)
    labels = [None if c is None else c.label for c in columns]
    w, w2 = SMALL.workers, SMALL.workers * 2
    assert labels == [f"single\nW={w}", f"2x2\nW={w}", None, f"2x2\nW={w2}"]
    for column in filter(None, columns):
        assert len({c.measured_setup["workers"] for c in column.checks}) == 1
        assert all(c.predicted is column.predicted for c in column.checks)
    assert_png(save_figure(sweep_vs_measured_figure(validation), tmp_path / "pools.png"))
