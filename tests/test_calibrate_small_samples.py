"""Small samples: no effect is declared from data that cannot carry it, and a prediction
says when it runs far past what its scenario was calibrated on.

Each effect calibrate declares has a minimum-data rule (tested with data that would
show the effect plainly if they were enough) and a false-positive rate measured at
small n on data without the effect. Statistical tests are seeded. "At most nominal"
is a one-sided binomial test of the claims against the effect's nominal rate at
significance 0.01: a rate truly at nominal fails it about 1% of the time (never,
with the seeds fixed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from calibrate_helpers import TRUE, write_traces

from pxn.acceptance import Acceptance
from pxn.api.advice_report import advice_report
from pxn.api.prediction_report import EXTRAPOLATION, extrapolation_warning, predictions_report
from pxn.api.report import Note
from pxn.calibrate.traces import overhead, slowdown
from pxn.calibrate.traces.acceptance import (
    CORRELATION_MIN_STEPS,
    DECAY_ALPHA,
    DECAY_MIN_ACCEPTED,
    DECAY_MIN_PROPOSALS,
    DECAY_MIN_STEPS,
    fit_acceptance,
    fit_correlation,
)
from pxn.calibrate.traces.acceptance_likelihood import Steps
from pxn.calibrate.traces.fit import CAP_ALPHA, CAP_MIN_SAMPLE, fit_latency
from pxn.calibrate.traces.overhead import fit_load_effects
from pxn.calibrate.traces.phases import PHASE_ALPHA, PHASE_TEST_MIN, phase_test
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.calibrate.traces.slowdown import fit_slowdown
from pxn.run_summary import summarize
from pxn.scenario import CalibratedOn, Scenario, Uncertainty
from pxn.shape import Shape
from pxn.sim.advise import Ask
from pxn.sim.advise_search import advise
from pxn.sim.predict import sweep
from pxn.trace import Rollout, RunStart
from pxn.trace_reading import Trace, read_one

SHAPES = {"single": 1, "2x2": 4, "4x4": 16}  # proposals a step judges


def at_most(claims: int, trials: int, nominal: float) -> bool:
    return scipy.stats.binomtest(claims, trials, nominal, alternative="greater").pvalue > 0.01


def run_steps(proposals: int, k: int, acceptance: Acceptance, rng: np.random.Generator) -> Steps:
    """One run of steps of k siblings (the last may be short), accepted as the simulator does:
    one step rate per step, from the proposals made before it, then each sibling at it."""
    judged = np.array([k] * (proposals // k) + ([proposals % k] if proposals % k else []))
    made = np.concatenate([[0], np.cumsum(judged)[:-1]])
    passed = [
        rng.binomial(j, acceptance.step_rate(rng, m)) for j, m in zip(judged, made, strict=True)
    ]
    return Steps.of(made, judged, passed)


# ---- acceptance decay ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_decay_is_claimed_at_most_nominally_under_constant_acceptance(shape: str) -> None:
    """400 runs at each of 4, 8, 16 and 40 proposals; batched shapes with the siblings
    correlated (rho 0.3), which a test treating proposals as independent would take for
    a trend."""
    k = SHAPES[shape]
    truth = Acceptance(0.3, correlation=0.3 if k > 1 else 0.0)
    trials = 400
    for proposals in (4, 8, 16, 40):
        rng = np.random.default_rng(proposals * 100 + k)
        fits = [fit_acceptance(run_steps(proposals, k, truth, rng)) for _ in range(trials)]
        claims = sum(fit.chosen.tau is not None for fit in fits)
        if proposals < DECAY_MIN_PROPOSALS:
            assert claims == 0 and all("not testable" in f.reason for f in fits)
        assert at_most(claims, trials, DECAY_ALPHA), f"{shape}, n={proposals}: {claims}/{trials}"


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_realistic_decay_is_still_found_in_200_proposals(shape: str) -> None:
    """a0 = 0.4, tau = 60 (the calibration example's truth): found in at least 80% of 50
    runs (measured: all of them, in every shape; about half to two thirds at 100)."""
    k = SHAPES[shape]
    rng = np.random.default_rng(60 + k)
    truth = Acceptance(0.4, tau=60.0)
    fits = [fit_acceptance(run_steps(200, k, truth, rng)) for _ in range(50)]
    found = [f.chosen.tau for f in fits if f.chosen.tau is not None]
    assert len(found) >= 40, f"{len(found)}/50"
    assert 30 < np.median(found) < 120


def test_too_little_data_is_not_testable_however_plain_the_pattern() -> None:
    """Each rule alone: the data show a steep decay, but one count is short."""
    few_proposals = Steps.of(np.arange(12), np.ones(12), [1.0] * 6 + [0.0] * 6)
    few_accepted = Steps.of(np.arange(100), np.ones(100), [1.0] * 4 + [0.0] * 96)
    few_steps = Steps.of([0, 16, 32, 48], [16] * 4, [12, 2, 0, 0])
    for steps, rule in (
        (few_proposals, f"(needs {DECAY_MIN_PROPOSALS})"),
        (few_accepted, f"(needs {DECAY_MIN_ACCEPTED})"),
        (few_steps, f"(needs {DECAY_MIN_STEPS})"),
    ):
        fit = fit_acceptance(steps)
        assert fit.chosen.tau is None and np.isnan(fit.lr_pvalue)
        assert "decay not testable" in fit.reason and rule in fit.reason, fit.reason
        assert fit.lr_statistic > 4  # the chi-square test would have claimed it


def test_tau_is_never_below_one_step_nor_a_tenth_of_the_data() -> None:
    """Two 2x2 runs whose first step passed whole and nothing after: the likelihood grows
    as tau shrinks to nothing, so tau stops at its floor, one step (4 proposals)."""
    run = ([0, 4, 8, 12, 16, 20, 24, 28, 32], [4] * 9, [4] + [0] * 8)
    steps = Steps.of(*(np.concatenate([column, column]) for column in run))
    fit = fit_acceptance(steps)
    assert fit.tau_floor == 4
    assert fit.chosen.tau == pytest.approx(4, rel=1e-3)
    assert "at its floor" in fit.reason
    single = fit_acceptance(Steps.of(np.arange(200), np.ones(200), [1.0] * 6 + [0.0] * 194))
    assert single.tau_floor == pytest.approx(19.9)  # 199 proposals seen / 10
    assert single.decay_tau >= single.tau_floor


def test_siblings_move_together_in_the_decay_test() -> None:
    """Constant acceptance with strongly correlated siblings: whole steps pass or fail.
    Read as 60 independent proposals, 15 steps of 4 with the passes early would be a
    decay; as 15 exchangeable steps it is not surprising enough to claim."""
    passed = np.array([4, 0, 4, 0, 4, 4, 0, 0, 4, 0, 0, 0, 4, 0, 0])
    steps = Steps.of(np.arange(15) * 4, np.full(15, 4), passed)
    apart = Steps.of(np.repeat(np.arange(15) * 4, 4), np.ones(60), np.repeat(passed > 0, 4))
    as_steps, as_proposals = fit_acceptance(steps), fit_acceptance(apart)
    assert as_steps.lr_statistic == pytest.approx(as_proposals.lr_statistic)
    assert as_proposals.lr_pvalue < DECAY_ALPHA < as_steps.lr_pvalue


# ---- within-step correlation ---------------------------------------------------------


@pytest.mark.parametrize("k", [2, 4, 16])
def test_correlation_is_claimed_at_most_nominally_at_small_n(k: int) -> None:
    """400 runs of 8, 16 and 40 proposals in steps of k, independent siblings."""
    trials = 400
    for proposals in (8, 16, 40):
        if proposals < 2 * k:
            continue
        rng = np.random.default_rng(proposals + k)
        claims = 0
        for _ in range(trials):
            steps = run_steps(proposals, k, Acceptance(0.3), rng)
            mean = np.full(len(steps.made), steps.accepted / steps.proposals)
            fit = fit_correlation(steps, mean)
            claims += fit.chosen > 0
            if len(steps.made) < CORRELATION_MIN_STEPS:
                assert fit.chosen == 0 and not fit.identified
        assert at_most(claims, trials, 0.05), f"k={k}, n={proposals}: {claims}/{trials}"


def test_correlation_needs_five_steps_of_siblings() -> None:
    """Four steps, each all or nothing: as correlated as steps can be, and still too few."""
    steps = Steps.of([0, 4, 8, 12], [4] * 4, [4, 0, 4, 0])
    fit = fit_correlation(steps, np.full(4, 0.5))
    assert fit.chosen == 0 and "not testable" in fit.reason


# ---- load slowdown -------------------------------------------------------------------


@pytest.mark.slow
def test_slowdown_is_claimed_at_most_nominally_at_small_n() -> None:
    """Latencies independent of load (1 to 4 calls in flight), 400 fits at each n; the
    chi-square reference claimed 2.6-3.3% at 6 calls and 1-2% at 10 (nominal 1%)."""
    trials = 400
    families = {
        "gamma": lambda rng, n: rng.gamma(3.0, 0.7, n),
        "lognorm": lambda rng, n: rng.lognormal(0.0, 1.0, n),
    }
    for name, draw in families.items():
        for n in (6, 10, 20, 40):
            rng = np.random.default_rng(n)
            claims = 0
            for _ in range(trials):
                fit = fit_slowdown(np.zeros(n, int), rng.integers(1, 5, n), draw(rng, n), None)
                claims += fit.chosen > 0
            assert at_most(claims, trials, slowdown.ALPHA), f"{name}, n={n}: {claims}/{trials}"


def test_a_slowdown_needs_enough_calls_and_enough_of_them_off_the_usual_load() -> None:
    rng = np.random.default_rng(5)
    loads = np.tile([1, 4], 8)  # 16 calls: plainly slower at load 4, but fewer than 20
    latency = rng.gamma(20.0, 0.05, 16) * (1 + 0.5 * (loads - 1))
    few = fit_slowdown(np.zeros(16, int), loads, latency, None)
    assert few.identified and few.beta > 0.3
    assert few.chosen == 0 and "not testable" in few.reason
    loads = np.array([4] * 97 + [1] * 3)  # 100 calls, 3 of them alone
    latency = rng.gamma(20.0, 0.05, 100) * (1 + 0.5 * (loads - 1))
    lopsided = fit_slowdown(np.zeros(100, int), loads, latency, None)
    assert lopsided.chosen == 0 and "3 away from" in lopsided.reason
    enough = fit_slowdown(np.zeros(40, int), np.tile([1, 4], 20), rng.gamma(20.0, 0.05, 40)
                          * (1 + 0.5 * (np.tile([1, 4], 20) - 1)), None)  # fmt: skip
    assert enough.chosen > 0.3 and enough.pvalue < slowdown.ALPHA


def batches(widths: list[int], rng: np.random.Generator, per_call: float = 0.0) -> Trace:
    """Rollouts in batches of the given widths, each call `per_call` seconds longer for
    every other call of its batch (none: latencies independent of the width)."""
    start = RunStart(start=0.0, end=0.0, source="runner", shape="1x1", budget=10, workers=4,
                     reflection_concurrency=1, valset_size=1, trainset_size=3, minibatch=1,
                     seed=0)  # fmt: skip
    events: list = [start]
    for batch, width in enumerate(widths):
        t = 30.0 * batch
        for w in range(width):
            latency = float(rng.gamma(4.0, 0.25)) + per_call * (width - 1)
            events.append(Rollout(start=t, end=t + latency, iteration=batch, phase="full_val",
                                  worker=w, candidate="0", example=str(w)))  # fmt: skip
    return Trace(Path("x"), events)


def test_the_load_effect_is_declared_at_most_nominally_and_never_below_its_minimum() -> None:
    """400 traces at each size, 1 to 4 calls per batch; the declaration is one-sided at
    ALPHA beyond MIN_RHO, so its nominal rate is at most ALPHA / 2."""
    trials = 400
    for batches_per_trace in (3, 6, 12, 24):
        rng = np.random.default_rng(batches_per_trace)
        claims = 0
        for _ in range(trials):
            trace = batches(list(rng.integers(1, 5, batches_per_trace)), rng)
            [effect] = fit_load_effects([trace])
            claims += effect.significant
            if effect.n < overhead.MIN_CALLS:
                assert not effect.significant
        assert at_most(claims, trials, overhead.ALPHA / 2), f"{batches_per_trace}: {claims}"
    # 15 calls, each 2 s longer per other call in flight: plain, and still too few.
    [effect] = fit_load_effects([batches([1, 2, 3, 4, 2, 3], rng, per_call=2.0)])
    assert effect.spearman > 0.8 and effect.pvalue < overhead.ALPHA
    assert effect.n < overhead.MIN_CALLS and not effect.significant


# ---- caps and phases -----------------------------------------------------------------


@pytest.mark.slow
def test_no_cap_is_claimed_on_uncapped_latencies_at_small_n() -> None:
    """100 samples each of 8 to 40 latencies from three families: no claim (nominal 0.1%)."""
    rng = np.random.default_rng(12)
    families = {
        "gamma": lambda n: rng.gamma(3.0, 0.7, n),
        "lognorm": lambda n: rng.lognormal(0.0, 0.2, n),
        "weibull": lambda n: rng.weibull(8.0, n),
    }
    for name, draw in families.items():
        for n in (8, 12, 20, 40):
            fits = [fit_latency(name, draw(n)) for _ in range(100)]
            claims = sum(fit.tail.capped for fit in fits)
            assert at_most(claims, 100, CAP_ALPHA), f"{name}, n={n}: {claims}"
            if n < CAP_MIN_SAMPLE:
                assert all("not testable" in fit.tail.reason for fit in fits)


def test_a_pile_in_a_small_sample_is_not_a_cap() -> None:
    """15 latencies, 6 of them at one value: a cap in a large sample, untestable here."""
    rng = np.random.default_rng(3)
    latencies = np.concatenate([rng.gamma(3.0, 0.7, 9), np.full(6, 4.0)])
    assert not fit_latency("rollout", latencies).tail.capped
    larger = np.concatenate([rng.gamma(3.0, 0.7, 60), np.full(8, 4.0)])
    larger = np.minimum(larger, 4.0)
    assert fit_latency("rollout", larger).tail.capped


def test_phases_are_told_apart_at_most_nominally_from_their_minimum() -> None:
    """Same-latency phases of PHASE_TEST_MIN rollouts and more: 1000 trials per layout,
    nominal PHASE_ALPHA. A phase with fewer is left out of the test."""
    rng = np.random.default_rng(4)
    trials = 1000
    for sizes in ((PHASE_TEST_MIN,) * 2, (PHASE_TEST_MIN,) * 4, (5, 10, 20, 40)):
        claims = sum(
            phase_test([rng.gamma(3.0, 0.7, n) for n in sizes]) < PHASE_ALPHA for _ in range(trials)
        )
        assert at_most(claims, trials, PHASE_ALPHA), f"{sizes}: {claims}/{trials}"
    # One phase far slower, but with too few rollouts to count: nothing to compare.
    few = [rng.gamma(3.0, 0.7, 40), 10 + rng.gamma(3.0, 0.7, PHASE_TEST_MIN - 1)]
    assert np.isnan(phase_test(few))


# ---- how far a prediction extrapolates ------------------------------------------------


def test_calibrate_records_how_long_its_runs_were(tmp_path: Path) -> None:
    short = TRUE.replace(budget=300)
    runs = write_traces(tmp_path, short, Shape(2, 2), range(2))
    cal = calibrate_traces(runs)
    summaries = [summarize(read_one(run)) for run in runs]
    assert cal.scenario.calibrated_on == CalibratedOn(
        runs=2,
        metric_calls=max(s.metric_calls for s in summaries),
        proposals=max(s.proposals for s in summaries),
    )
    again = Scenario.from_dict(cal.scenario.to_dict())
    assert again.calibrated_on == cal.scenario.calibrated_on


def small(budget: int, calibrated_on: CalibratedOn | None, draws: bool) -> Scenario:
    """TRUE at a small budget; with draws, the rollout's scale known to a factor of two."""
    uncertainty = None
    if draws:
        scales = np.geomspace(0.35, 1.4, 10)
        uncertainty = Uncertainty("a test's", tuple({"rollout.scale": s} for s in scales))
    return TRUE.replace(budget=budget, calibrated_on=calibrated_on, uncertainty=uncertainty)


def test_a_prediction_far_past_its_calibration_says_so_and_by_how_much() -> None:
    seen = CalibratedOn(runs=1, metric_calls=60, proposals=8)
    scenario = small(600, seen, draws=True)
    predictions = sweep(scenario, [Shape(2, 2)], replicates=40)
    warning = extrapolation_warning(scenario, predictions)
    assert warning is not None and warning.label == "warning"
    assert "calibrated on runs of up to 60 metric calls and 8 proposals" in warning.text
    assert "predicting 600 metric calls (10x)" in warning.text
    assert "acceptance beyond proposal 8 is extrapolated" in warning.text
    # The draws span a factor of four in latency: far wider than the noise alone.
    [p] = [p for p in predictions if p.shape == Shape(2, 2)]
    split = p.wall_clock_split
    ratio = (p.wall_clock.high - p.wall_clock.low) / (split.noise.high - split.noise.low)
    assert ratio > 2
    assert "widen the wall-clock's 5-95% interval by up to" in warning.text
    shown = predictions_report(scenario, predictions).shown
    assert any(isinstance(n, Note) and n.label == "warning" for n in shown)


def test_no_warning_within_the_calibrated_length_and_an_honest_one_without_draws() -> None:
    seen = CalibratedOn(runs=3, metric_calls=400, proposals=40)
    within = small(int(400 * EXTRAPOLATION) - 100, seen, draws=False)
    assert extrapolation_warning(within, sweep(within, [Shape(1, 1)], replicates=4)) is None
    uncalibrated = small(2000, None, draws=False)
    assert extrapolation_warning(uncalibrated, sweep(uncalibrated, [Shape(1, 1)], 4)) is None
    beyond = small(2000, seen, draws=False)
    warning = extrapolation_warning(beyond, sweep(beyond, [Shape(1, 1)], replicates=4))
    assert warning is not None and "(5x)" in warning.text
    assert "no parameter draws" in warning.text and "unknown" in warning.text


def test_advice_far_past_its_calibration_says_so_too() -> None:
    """The README demo's advise step asks 10x the budget its scenario was calibrated on."""
    scenario = small(60, CalibratedOn(runs=1, metric_calls=60, proposals=8), draws=True)
    advice = advise(scenario, Ask(600, (1, 2), (1, 2), (3,), (4,), replicates=20))
    [warning] = [n for n in advice_report(advice).shown if getattr(n, "label", "") == "warning"]
    assert "predicting 600 metric calls (10x)" in warning.text
