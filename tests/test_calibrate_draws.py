"""Parameter draws: valid scenarios, honest about how little one short run tells, narrower
with more data, and holding the truth in a round trip.

The coverage test calibrates 8 independent single runs; each draw set's central
90% should hold a true parameter about 90% of the time, so 5 or more of 8 is
asked (a truly 90% coverage falls below that with probability 0.005; a
coverage of 50% passes it with probability 0.36 only).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from calibrate_helpers import TRUE, write_traces
from conftest import assert_user_error, run_pxn

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.scenario import Scenario
from pxn.shape import Shape

# Calibration round trips on simulated traces: seconds each, so outside `make quick`.
pytestmark = pytest.mark.slow

MAIN = ("rollout.a", "rollout.scale", "reflection.s", "reflection.scale", "acceptance.a0")
TRUTH = {"rollout.a": 3.0, "rollout.scale": 0.7, "reflection.s": 0.3, "reflection.scale": 9.0,
         "acceptance.a0": 0.25, "skip_perfect": 0.1}  # fmt: skip


def width(cal, path: str) -> float:
    low, high = cal.draws.spread[path]
    return high - low


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory):
    """One short run: 400 metric calls."""
    runs = write_traces(tmp_path_factory.mktemp("short"), TRUE.replace(budget=400), Shape(1, 1),
                        range(1))  # fmt: skip
    return calibrate_traces(runs, draws=100)


@pytest.fixture(scope="module")
def long(tmp_path_factory: pytest.TempPathFactory):
    """Four full runs: 8,000 metric calls."""
    runs = write_traces(tmp_path_factory.mktemp("long"), TRUE, Shape(1, 1), range(4))
    return calibrate_traces(runs, draws=100)


def test_draws_are_valid_scenarios_and_survive_the_toml(long) -> None:
    scenario = long.scenario
    assert len(scenario.uncertainty) == 100
    assert set(scenario.uncertainty.parameters) >= set(MAIN) | {"stage_overhead", "skip_perfect"}
    scenario.validate_draws()
    loaded = Scenario.from_dict(tomllib.loads(scenario.to_toml()))
    assert loaded == scenario
    assert "4 run(s)" in scenario.uncertainty.source


def test_one_short_run_is_very_uncertain_and_says_why(short, long) -> None:
    assert (
        "from one run the draws hold only its sampling error" in short.scenario.uncertainty.source
    )
    # The draws of a0 spread at least as a binomial's own 90% interval does.
    a = short.acceptance
    wilson = scipy.stats.binomtest(a.accepted, a.proposals).proportion_ci(0.9, method="wilson")
    assert width(short, "acceptance.a0") >= 0.8 * (wilson.high - wilson.low)
    for path in MAIN:  # about 20 times less data: the spread is several times wider
        assert width(short, path) > 2.5 * width(long, path), path


def test_the_draws_hold_the_truth_in_a_round_trip(long) -> None:
    for path in (*MAIN, "skip_perfect"):
        low, high = long.draws.spread[path]
        assert low <= TRUTH[path] <= high, (path, low, high)


def draw_means(cal) -> dict[str, np.ndarray]:
    """Per draw: the mean rollout and reflection latency, a0 and the skip share (whatever
    family each calibration chose, these are comparable with the truth)."""
    scenarios = [cal.scenario.with_parameters(d) for d in cal.scenario.uncertainty.draws]
    return {
        "rollout mean": np.array([s.rollout.mean() for s in scenarios]),
        "reflection mean": np.array([s.reflection.mean() for s in scenarios]),
        "acceptance.a0": np.array([s.acceptance.a0 for s in scenarios]),
        "skip_perfect": np.array([s.skip_perfect for s in scenarios]),
    }


@pytest.mark.slow
def test_coverage_of_the_main_parameters_over_independent_runs(tmp_path: Path) -> None:
    small = TRUE.replace(budget=1000)
    truth = {"rollout mean": TRUE.rollout.mean(), "reflection mean": TRUE.reflection.mean(),
             "acceptance.a0": 0.25, "skip_perfect": 0.1}  # fmt: skip
    covered = dict.fromkeys(truth, 0)
    for r in range(8):
        [run] = write_traces(tmp_path / str(r), small, Shape(1, 1), range(100 + r, 101 + r))
        means = draw_means(calibrate_traces([run], draws=100))
        for name, value in truth.items():
            low, high = np.percentile(means[name], [5, 95])
            covered[name] += low <= value <= high
    assert all(n >= 5 for n in covered.values()), covered


def test_a_decaying_scenario_draws_its_decay(tmp_path: Path) -> None:
    decaying = TRUE.replace(acceptance=Acceptance(0.5, tau=120.0), skip_perfect=0.0)
    cal = calibrate_traces(write_traces(tmp_path, decaying, Shape(1, 1), range(2)), draws=40)
    assert cal.scenario.acceptance.tau is not None
    taus = [d["acceptance.tau"] for d in cal.scenario.uncertainty.draws]
    assert np.percentile(taus, 5) < 120 < np.percentile(taus, 95)
    cal.scenario.validate_draws()


def test_the_cli_writes_as_many_draws_as_asked(tmp_path: Path) -> None:
    runs = write_traces(tmp_path, TRUE.replace(budget=600), Shape(2, 2), range(1))
    out = tmp_path / "cal.toml"
    result = run_pxn("calibrate", *runs, "--draws", "20", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "parameter uncertainty: 20 parameter draws" in result.stdout
    assert len(tomllib.loads(out.read_text())["uncertainty"]["draws"]) == 20
    result = run_pxn("calibrate", *runs, "--draws", "0", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "uncertainty" not in tomllib.loads(out.read_text())
    assert_user_error(run_pxn("calibrate", *runs, "--draws", "-1", "-o", out), "--draws", ">= 0")
