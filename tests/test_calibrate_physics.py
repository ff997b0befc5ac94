"""Round trip of the simulator's newer physics: simulate with known per-phase latency,
correlated acceptance and recurring parents; calibrate; recover them; predict alike.

Three 2x2 runs of B = 2000 give about 2,900 full-validation rollouts (a gamma's
mean to ~2%), 137 steps of up to 4 judged proposals (rho = 0.3 to about
+-0.07) and 136 steps with two parents drawn (front_share to about +-0.05).
Tolerances are about twice those. Single runs recover front_share from their
rejected steps alone.
"""

from __future__ import annotations

import pytest
from calibrate_helpers import TRUE, relative, write_traces

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.pipeline import Calibration, calibrate_traces
from pxn.distribution import Distribution
from pxn.shape import Shape
from pxn.sim.predict import sweep

SLOW_VALIDATION = Distribution("gamma", params={"a": 3.0, "scale": 1.2})  # mean 3.6 s
PHYSICS = TRUE.replace(
    rollout_phases={"full_val": SLOW_VALIDATION},
    acceptance=Acceptance(0.3, correlation=0.3),
    front_share=0.4,
)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Calibration:
    runs = write_traces(tmp_path_factory.mktemp("physics"), PHYSICS, Shape(2, 2), range(3))
    return calibrate_traces(runs, draws=50)


def test_a_phase_with_its_own_latency_gets_it(calibration: Calibration) -> None:
    s = calibration.scenario
    assert calibration.phase_pvalue < 1e-10
    assert relative(s.rollout_latency("full_val").mean(), SLOW_VALIDATION.mean()) < 0.04
    for phase in ("parent_minibatch", "child_minibatch"):
        assert relative(s.rollout_latency(phase).mean(), TRUE.rollout.mean()) < 0.04
    # [rollout] stays the pooled fit, a mixture of both.
    assert TRUE.rollout.mean() < s.rollout.mean() < SLOW_VALIDATION.mean()


def test_correlated_acceptance_is_recovered(calibration: Calibration) -> None:
    a = calibration.scenario.acceptance
    assert calibration.acceptance.correlation.pvalue < 1e-6
    assert a.correlation == pytest.approx(0.3, abs=0.15)
    assert a.a0 == pytest.approx(0.3, abs=0.08)
    assert a.tau is None


def test_recurring_parents_give_the_front_share(calibration: Calibration) -> None:
    assert calibration.front.pvalue < 1e-4
    assert calibration.scenario.front_share == pytest.approx(0.4, abs=0.1)
    low, high = calibration.draws.spread["front_share"]
    assert low <= 0.4 <= high


def test_single_runs_give_the_front_share_from_their_rejected_steps(tmp_path) -> None:
    """One parent a step: the parents of consecutive steps with no acceptance between them
    are draws from one front, so single runs alone identify the share (about 380 such
    steps in three runs)."""
    runs = write_traces(
        tmp_path, PHYSICS.replace(acceptance=Acceptance(0.3)), Shape(1, 1), range(3)
    )
    calibration = calibrate_traces(runs)
    assert calibration.front.steps > 300 and calibration.front.pvalue < 1e-4
    assert calibration.scenario.front_share == pytest.approx(0.4, abs=0.1)
    low, high = calibration.front.interval
    assert low <= 0.4 <= high


def test_the_draws_carry_the_new_parameters(calibration: Calibration) -> None:
    parameters = calibration.scenario.uncertainty.parameters
    assert "acceptance.correlation" in parameters and "front_share" in parameters
    assert any(p.startswith("rollout.phases.full_val.") for p in parameters)
    calibration.scenario.validate_draws()


def test_the_recovered_scenario_predicts_the_same_wall_clock(calibration: Calibration) -> None:
    shapes = [Shape(1, 1), Shape(4, 1)]
    point = calibration.scenario.replace(uncertainty=None, seed=PHYSICS.seed + 1)
    truth = sweep(PHYSICS, shapes, replicates=40)
    predicted = sweep(point, shapes, replicates=40)
    for t, p in zip(truth, predicted, strict=True):
        assert relative(p.wall_clock.mean, t.wall_clock.mean) < 0.06, t.shape


def test_the_report_states_each_new_fit(calibration: Calibration) -> None:
    from pxn.api.calibration_report import calibration_header

    header = calibration_header(calibration)
    fragments = [
        "[rollout.phases] for", "full_val:", "correlated within an iteration", "correlation=",
        "parents recur", "front_share=", "tail: no cap", "duplicate_children: not fitted",
        "parameter uncertainty: 50 parameter draws",
    ]  # fmt: skip
    for fragment in fragments:
        assert fragment in header, fragment
