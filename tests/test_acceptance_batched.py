"""A batched step's own acceptance: `acceptance.batched`, simulated and calibrated.

The key scales a0 for a shape that proposes more than one child per step and
leaves single runs alone. Calibration fits it when the traces hold both kinds
of step, with a Katz interval and a likelihood-ratio test against one a0.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import TRUE, write_traces
from conftest import assert_user_error, run_pxn

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.acceptance import RATIO_MIN_PROPOSALS, BatchedFit, fit_acceptance
from pxn.calibrate.traces.acceptance_likelihood import Steps
from pxn.calibrate.traces.draws import with_batched_prior
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.calibrate.traces.units import cut_into_units
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import analytic
from pxn.sim.model import simulate_once
from pxn.trace_reading import read_one

HALVED = TRUE.replace(acceptance=Acceptance(0.4, batched=0.5))


def test_a_batched_shape_accepts_at_the_scaled_rate_and_keeps_the_rest() -> None:
    decaying = Acceptance(0.4, tau=300.0, decay_until=200.0, correlation=0.2, batched=0.5)
    assert decaying.for_width(1) is decaying
    assert decaying.for_width(4) == Acceptance(0.2, 300.0, 200.0, 0.2)
    assert Acceptance(0.8, batched=1.25).for_width(2).a0 == 1.0
    plain = Acceptance(0.3)
    assert plain.for_width(16) is plain


@pytest.mark.parametrize(
    ("batched", "words"),
    [(0.0, "must be > 0: got 0.0"), (-1.0, "must be > 0"), (3.0, "0.4 = 1.2 is a batched")],
)
def test_an_impossible_ratio_is_refused(batched: float, words: str) -> None:
    with pytest.raises(PxnError, match=rf"^acceptance batched .*{words}"):
        Acceptance(0.4, batched=batched).validate()


def test_the_key_survives_the_toml_and_stays_out_when_it_is_one(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    HALVED.save(path)
    assert tomllib.loads(path.read_text())["acceptance"] == {"a0": 0.4, "batched": 0.5}
    assert Scenario.load(path).acceptance == HALVED.acceptance
    TRUE.save(path)
    assert "batched" not in tomllib.loads(path.read_text())["acceptance"]


def test_a_bad_ratio_in_a_scenario_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(HALVED.to_toml().replace("batched = 0.5", "batched = 4.0"))
    result = run_pxn("simulate", str(path), "--reps", "2")
    assert_user_error(result, "acceptance batched 4 x a0 0.4 = 1.6 is a batched iteration's")


def test_the_simulator_spares_singles_and_halves_batched_acceptance() -> None:
    same = TRUE.replace(acceptance=Acceptance(0.4))
    for r in range(3):
        assert simulate_once(HALVED, Shape(1, 1), r) == simulate_once(same, Shape(1, 1), r)
    accepted = proposals = 0
    for r in range(40):
        run = simulate_once(HALVED, Shape(2, 2), r)
        accepted, proposals = accepted + run.accepted, proposals + run.proposals
    share = accepted / proposals
    assert abs(share - 0.2) < 3 * np.sqrt(0.2 * 0.8 / proposals), share


def test_the_closed_form_uses_the_batched_rate() -> None:
    quarter = TRUE.replace(acceptance=Acceptance(0.2))
    assert analytic(HALVED, Shape(2, 2)) == analytic(quarter, Shape(2, 2))
    assert analytic(HALVED, Shape(1, 1)) != analytic(quarter, Shape(1, 1))


def test_steps_know_which_runs_were_batched(tmp_path: Path) -> None:
    runs = write_traces(tmp_path / "a", TRUE, Shape(1, 1), range(1))
    runs += write_traces(tmp_path / "b", TRUE, Shape(2, 1), range(1))
    steps = cut_into_units([read_one(run) for run in runs]).steps
    assert steps.batched.dtype == bool
    assert not steps.batched[: int((~steps.batched).sum())].any()
    assert steps.batched[int((~steps.batched).sum()) :].all()
    assert steps.judged[steps.batched].max() == 2 and steps.judged[~steps.batched].max() == 1


def mixed_steps(single: tuple[int, int], batched: tuple[int, int], seed: int = 0) -> Steps:
    """Singles judged one at a time, then steps of 4 (batched); the passes in random order."""
    rng = np.random.default_rng(seed)
    (sa, sn), (ba, bn) = single, batched
    singles = rng.permutation(np.arange(sn) < sa)
    per_step = rng.permutation(np.arange(bn) < ba).reshape(-1, 4).sum(axis=1)
    steps = len(per_step)
    return Steps.of(
        np.concatenate([np.arange(sn), np.arange(steps) * 4]),
        np.concatenate([np.ones(sn), np.full(steps, 4)]),
        np.concatenate([singles, per_step]),
        np.concatenate([np.zeros(sn, bool), np.ones(steps, bool)]),
    )


def test_the_ratio_is_the_two_shares_and_is_tested() -> None:
    fit = fit_acceptance(mixed_steps((80, 200), (24, 120)))
    b = fit.batched
    assert b.identified and (b.single, b.batched) == ((80, 200), (24, 120))
    assert b.ratio == pytest.approx(0.5)
    assert fit.chosen == Acceptance(0.4, batched=pytest.approx(0.5))
    assert b.interval[0] < 0.5 < b.interval[1] < 1
    assert b.pvalue < 0.01 and "differ" in b.reason
    alike = fit_acceptance(mixed_steps((80, 200), (46, 120))).batched
    assert alike.pvalue > 0.3 and "do not tell it from 1" in alike.reason
    assert alike.interval[0] < 1 < alike.interval[1]


@pytest.mark.parametrize(
    ("single", "batched", "why"),
    [
        ((80, 200), (0, 0), "only single iterations"),
        ((0, 0), (30, 120), "only batched iterations"),
        ((5, RATIO_MIN_PROPOSALS - 1), (30, 120), "9 single and 120 batched proposals"),
        ((0, 40), (30, 120), "no single iteration's proposal passed"),
    ],
)
def test_without_both_kinds_the_ratio_stays_one(single, batched, why) -> None:
    if single[1] == 0:
        steps = mixed_steps((0, 0), batched)
    else:
        steps = mixed_steps(single, batched) if batched[1] else mixed_steps(single, (0, 0))
    fit = fit_acceptance(steps)
    assert not fit.batched.identified and fit.chosen.batched == 1
    assert why in fit.batched.reason


def test_one_rate_is_claimed_different_at_most_nominally() -> None:
    """Under one true rate for both, the test claims a difference in about 5% of 400 data sets."""
    rng = np.random.default_rng(11)
    claims = 0
    for _ in range(400):
        single = (int(rng.binomial(60, 0.35)), 60)
        batched = (int(rng.binomial(80, 0.35)), 80)
        fit = fit_acceptance(mixed_steps(single, batched, seed=int(rng.integers(1 << 30))))
        claims += fit.batched.pvalue < 0.05
    assert claims <= 32, claims  # 5% of 400 is 20; a binomial 99.5% bound


@pytest.mark.slow
def test_calibration_recovers_the_ratio_and_draws_it(tmp_path: Path) -> None:
    """Singles at a0 = 0.4 and 2x2 runs at half that: the ratio is found, its interval and
    its draws hold 0.5, a0 is the singles', and predictions of 2x2 accept at the truth."""
    truth = HALVED.replace(budget=1500)
    runs = write_traces(tmp_path / "s", truth, Shape(1, 1), range(3))
    runs += write_traces(tmp_path / "b", truth, Shape(2, 2), range(3, 6))
    cal = calibrate_traces(runs, draws=40)
    b = cal.acceptance.batched
    assert b.interval[0] < 0.5 < b.interval[1], b
    assert b.pvalue < 0.05, b.reason
    assert cal.scenario.acceptance.a0 == pytest.approx(0.4, abs=0.08)
    drawn = [d["acceptance.batched"] for d in cal.scenario.uncertainty.draws]
    assert np.percentile(drawn, 2.5) < 0.5 < np.percentile(drawn, 97.5)
    assert len(set(drawn)) > 10


@pytest.mark.slow
def test_the_report_and_the_file_carry_the_ratio(tmp_path: Path) -> None:
    runs = write_traces(tmp_path / "s", HALVED, Shape(1, 1), range(2))
    runs += write_traces(tmp_path / "b", HALVED, Shape(4, 1), range(2, 4))
    out = tmp_path / "calibrated.toml"
    result = run_pxn("calibrate", *runs, "-o", out, "--draws", "5")
    assert result.returncode == 0, result.stderr
    [line] = [x for x in result.stdout.splitlines() if x.startswith("  batched iterations: ")]
    ratio = tomllib.loads(out.read_text())["acceptance"]["batched"]
    assert f"-> batched={ratio:.3g}" in line and "[95% " in line
    shown = line.removeprefix("  batched iterations: ")
    assert f"#   batched iterations: {shown}" in out.read_text()


def unidentified(single: tuple[int, int], batched: tuple[int, int]) -> BatchedFit:
    return BatchedFit(False, single, batched, 1.0, (1.0, 1.0), 0.0, math.nan, "")


def test_draws_from_singles_alone_take_the_ratio_from_its_prior() -> None:
    draws = tuple({"acceptance.a0": a0, "stage_overhead": 0.1} for a0 in [0.3, 0.9] * 200)
    drawn = with_batched_prior(draws, unidentified((80, 200), (0, 0)))
    assert [d["acceptance.a0"] for d in drawn] == [d["acceptance.a0"] for d in draws]
    ratios = np.array([d["acceptance.batched"] for d in drawn])
    assert all(d["acceptance.a0"] * d["acceptance.batched"] <= 1 for d in drawn)
    free = ratios[::2]  # at a0 = 0.3 the cap (1 / a0) never binds
    assert np.median(free) == pytest.approx(1.0, abs=0.05)
    assert np.percentile(free, [5, 95]) == pytest.approx([0.66, 1.51], rel=0.1)
    assert drawn == with_batched_prior(draws, unidentified((80, 200), (0, 0)))  # seeded


def test_draws_from_batched_runs_alone_keep_the_batched_rate() -> None:
    """a0 is then the batched steps' rate: a draw's single rate moves, its product does not."""
    draws = tuple({"acceptance.a0": 0.25} for _ in range(200))
    drawn = with_batched_prior(draws, unidentified((0, 0), (30, 120)))
    for d in drawn:
        assert d["acceptance.a0"] * d["acceptance.batched"] == pytest.approx(0.25, rel=1e-12)
        assert Acceptance(d["acceptance.a0"], batched=d["acceptance.batched"]).validate() is None
    assert np.std([d["acceptance.a0"] for d in drawn]) > 0.03


@pytest.mark.slow
def test_a_calibration_from_singles_says_the_prior_and_widens_batched_predictions(
    tmp_path: Path,
) -> None:
    runs = write_traces(tmp_path, TRUE, Shape(1, 1), range(2))
    cal = calibrate_traces(runs, draws=60)
    assert "parameter draws take it from its prior (lognormal, median 1" in (
        cal.acceptance.batched.reason
    )
    assert cal.scenario.acceptance.batched == 1
    ratios = [d["acceptance.batched"] for d in cal.scenario.uncertainty.draws]
    assert min(ratios) < 0.8 < 1.25 < max(ratios)
