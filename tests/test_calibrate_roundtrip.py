"""Round trip: simulate with known distributions, calibrate, recover them, predict alike.

Tolerances are set from the sample sizes: about 8,000 rollouts, 700
reflections and 700 proposals over four single runs. With those, a mean is
known to about 1-2% (rollouts) and 2-3% (reflections), a shape parameter
to a few percent, and an acceptance rate to +-0.03 (the Wilson interval).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import ROLLOUT, TRUE, relative, write_traces

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.acceptance import DECAY_PERMUTATIONS
from pxn.calibrate.traces.pipeline import Calibration, calibrate_traces
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.predict import sweep


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_traces(tmp_path_factory.mktemp("runs"), TRUE, Shape(1, 1), range(4))


@pytest.fixture(scope="module")
def calibration(runs: list[Path]) -> Calibration:
    return calibrate_traces(runs)


def test_rollout_family_and_parameters(calibration: Calibration) -> None:
    fit = calibration.rollout
    assert fit.n > 7000
    assert calibration.scenario.rollout.dist == "gamma"  # AIC picks the true family
    params = calibration.scenario.rollout.params
    assert relative(params["a"], 3.0) < 0.06
    assert relative(params["scale"], 0.7) < 0.06
    assert relative(calibration.scenario.rollout.mean(), ROLLOUT.mean()) < 0.03
    # The bootstrap intervals of the parameters hold the truth.
    assert fit.param_ci["a"][0] < 3.0 < fit.param_ci["a"][1]
    assert fit.mean_ci[0] < ROLLOUT.mean() < fit.mean_ci[1]
    # The wrong families fit worse, and the exponential is rejected outright.
    assert fit.fits[0].family == "gamma"
    assert fit.fit_of("expon").ks_pvalue < 1e-6


def test_reflection_latency(calibration: Calibration) -> None:
    fit = calibration.reflection
    lognorm = fit.fit_of("lognorm")
    assert lognorm is not None
    assert relative(lognorm.params["s"], 0.3) < 0.1
    assert relative(lognorm.params["scale"], 9.0) < 0.05
    truth = TRUE.reflection.mean()
    assert relative(calibration.scenario.reflection.mean(), truth) < 0.05
    assert lognorm.ks_pvalue > 0.01


def test_acceptance_stays_constant_and_holds_the_truth(calibration: Calibration) -> None:
    a = calibration.acceptance
    assert a.proposals > 500
    assert calibration.scenario.acceptance.tau is None
    assert a.wilson[0] < 0.25 < a.wilson[1]
    assert abs(calibration.scenario.acceptance.a0 - 0.25) < 0.04


def test_skip_overhead_and_setup(calibration: Calibration) -> None:
    s = calibration.scenario
    assert abs(s.skip_perfect - 0.1) < 0.03
    # The simulator pays exactly stage_overhead before every stage.
    assert s.stage_overhead == pytest.approx(0.2, rel=1e-6)
    for name in ("budget", "valset_size", "trainset_size", "workers", "minibatch"):
        assert getattr(s, name) == getattr(TRUE, name)
    assert calibration.concurrency.peak == TRUE.workers
    assert not calibration.notes  # same setup, complete runs, no load effect


def test_recovered_scenario_predicts_the_same_wall_clock(calibration: Calibration) -> None:
    """The point of calibrating: the same mean wall-clock, within 5%, for other shapes too."""
    shapes = [Shape(1, 1), Shape(2, 2), Shape(4, 1)]
    recovered = calibration.scenario.replace(seed=TRUE.seed + 1)  # independent draws
    truth = sweep(TRUE, shapes, replicates=60)
    predicted = sweep(recovered, shapes, replicates=60)
    for t, p in zip(truth, predicted, strict=True):
        assert relative(p.wall_clock.mean, t.wall_clock.mean) < 0.05, t.shape


def test_decay_is_recovered_when_present(tmp_path: Path) -> None:
    decaying = TRUE.replace(acceptance=Acceptance(0.5, tau=120.0), skip_perfect=0.0)
    runs = write_traces(tmp_path, decaying, Shape(1, 1), range(4))
    fit = calibrate_traces(runs).acceptance
    assert fit.chosen.tau is not None, fit.reason
    assert fit.lr_pvalue == 1 / (DECAY_PERMUTATIONS + 1)  # no rearrangement of the steps reaches it
    assert abs(fit.chosen.a0 - 0.5) < 0.12
    assert 60 < fit.chosen.tau < 240


def test_calibrated_toml_loads_and_names_its_sources(calibration: Calibration) -> None:
    from pxn.api.calibration_report import calibration_header

    text = calibration.scenario.to_toml(calibration_header(calibration))
    assert all(line.startswith("#") for line in text.splitlines()[:5])
    assert "trace.jsonl" in text and "AIC" in text and "Wilson" in text
    loaded = Scenario.from_dict(__import__("tomllib").loads(text))
    assert loaded == calibration.scenario
    assert np.isfinite(loaded.rollout.mean())
