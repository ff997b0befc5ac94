"""Tokens and prices: simulate with planted token counts, calibrate, recover them.

Sample sizes: about 10,000 rollouts and 900 reflections in the two-b runs
(5 single runs), about 8,000 and 700 in the one-b runs (4). A mean token count
is then known to about 1% (rollouts) and 2-3% (reflections); the per-example
slope to about 1.5% (Theil-Sen's interval), so base, the measured mean less b
slopes, to about 5%.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import TOKENS, TRUE, relative, strip_tokens, write_token_traces, write_traces
from conftest import assert_user_error, run_pxn

from pxn.calibrate.traces.pipeline import Calibration, calibrate_traces
from pxn.calibrate.traces.tokens import fit_counts, fit_reflection_input, lookup_prices
from pxn.scenario import Scenario
from pxn.shape import Shape

# Calibration round trips on simulated traces: seconds each, so outside `make quick`.
pytestmark = pytest.mark.slow

SINGLE = Shape(1, 1)


@pytest.fixture(scope="module")
def two_b(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three runs at b=2 and two at b=4, the latency planted 2 ms per input token."""
    root = tmp_path_factory.mktemp("two_b")
    runs = write_token_traces(root / "b2", TRUE.replace(minibatch=2), TOKENS, SINGLE, range(3))
    return runs + write_token_traces(
        root / "b4", TRUE.replace(minibatch=4), TOKENS, SINGLE, range(3, 5)
    )


@pytest.fixture(scope="module")
def two_b_calibration(two_b: list[Path]) -> Calibration:
    return calibrate_traces(two_b)


@pytest.fixture(scope="module")
def one_b(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four runs at b=3, reflection latency independent of tokens."""
    flat = TOKENS.__class__(
        **{**TOKENS.__dict__, "seconds_per_input_token": 0.0, "seconds_per_output_token": 0.0}
    )
    root = tmp_path_factory.mktemp("one_b")
    return write_token_traces(root, TRUE, flat, SINGLE, range(4))


@pytest.fixture(scope="module")
def one_b_calibration(one_b: list[Path]) -> Calibration:
    return calibrate_traces(one_b)


def test_token_distributions_recovered(two_b_calibration: Calibration) -> None:
    fit = two_b_calibration.token_counts
    assert fit is not None
    tokens = two_b_calibration.scenario.tokens
    assert tokens is not None
    for got, truth, tolerance in (
        (tokens.rollout_input, TOKENS.rollout_input, 0.02),
        (tokens.rollout_output, TOKENS.rollout_output, 0.03),
        (tokens.reflection_output, TOKENS.reflection_output, 0.05),
    ):
        assert relative(got.mean(), truth.mean()) < tolerance
    # Counts in the hundreds: one token is a small step, and the true family fits.
    assert tokens.rollout_input.dist == "gamma"
    assert relative(tokens.rollout_input.params["a"], 20.0) < 0.08
    assert fit.rollout_input.mean_ci[0] < TOKENS.rollout_input.mean() < fit.rollout_input.mean_ci[1]


def test_two_b_regression_recovers_base_and_per_example(two_b_calibration: Calibration) -> None:
    r = two_b_calibration.token_counts.reflection_input
    tokens = two_b_calibration.scenario.tokens
    assert set(r.by_minibatch) == {2, 4}
    assert r.per_example_ci is not None and "Theil-Sen" in r.method
    assert r.per_example_ci[0] < TOKENS.per_example < r.per_example_ci[1]
    assert relative(tokens.reflection_input_per_example, TOKENS.per_example) < 0.03
    assert relative(tokens.reflection_input_base, TOKENS.base) < 0.06
    # b=2 holds most reflections: the pooled latency is mostly theirs, and said so.
    assert tokens.measured_minibatch == 2
    assert any("measured_minibatch=2" in note for note in two_b_calibration.notes)
    # The line goes through the mean measured at b=2.
    assert tokens.reflection_input(2) == pytest.approx(r.by_minibatch[2][1])


def test_planted_latency_slope_recovered(two_b_calibration: Calibration) -> None:
    fit = two_b_calibration.token_counts
    assert fit.latency is not None and fit.latency.input_effect
    lo, hi = fit.latency.per_input_ci
    assert lo < TOKENS.seconds_per_input_token < hi
    per_input = two_b_calibration.scenario.tokens.reflection_seconds_per_input_token
    assert relative(per_input, TOKENS.seconds_per_input_token) < 0.1
    assert relative(fit.latency.per_output, TOKENS.seconds_per_output_token) < 0.1


def test_reflection_latency_is_that_at_the_measured_b(two_b_calibration: Calibration) -> None:
    """Reflections at b=4 are shifted to b=2 before the fit, not pooled with them.

    Pooled, the mean would be ~7% high: a third of the reflections read 1240
    more tokens, 2.5 s more at 2 ms a token.
    """
    t = TOKENS
    at_b2 = (
        t.reflection_noise.mean()
        + t.seconds_per_input_token * (t.base + 2 * t.per_example)
        + t.seconds_per_output_token * t.reflection_output.mean()
    )
    assert relative(two_b_calibration.scenario.reflection.mean(), at_b2) < 0.03


def test_one_b_approximates_per_example_from_rollouts(one_b_calibration: Calibration) -> None:
    """At one b, per_example is a mean parent-minibatch rollout's tokens in + out.

    The fixtures make a record exactly that long (TOKENS.per_example), so the
    approximation holds here; on a real task it is off by the program's prompt
    and the feedback (see fit_reflection_input).
    """
    r = one_b_calibration.token_counts.reflection_input
    tokens = one_b_calibration.scenario.tokens
    assert list(r.by_minibatch) == [3] and r.per_example_ci is None
    assert "one b (3)" in r.method and not r.floored
    assert tokens.measured_minibatch == 3
    assert relative(tokens.reflection_input_per_example, TOKENS.per_example) < 0.03
    assert relative(tokens.reflection_input_base, TOKENS.base) < 0.06
    assert tokens.reflection_input(3) == pytest.approx(r.by_minibatch[3][1])


def test_no_latency_slope_when_none_planted(one_b_calibration: Calibration) -> None:
    fit = one_b_calibration.token_counts
    assert fit.latency is not None and not fit.latency.input_effect
    assert one_b_calibration.scenario.tokens.reflection_seconds_per_input_token == 0
    assert "not used" in fit.latency_reason


def test_base_floored_when_records_outweigh_the_measured_input() -> None:
    """A task whose program prompt is long: the rollouts say 150 a record, the reflections
    read 300 at b=3. The line is held at base 0 through the measured mean."""
    fit = fit_reflection_input({3: [290.0, 300.0, 310.0]}, [150.0] * 10)
    assert fit.floored and fit.base == 0
    assert fit.per_example == pytest.approx(100.0)


def test_small_and_zero_counts_are_resampled_as_observed() -> None:
    rng = np.random.default_rng(0)
    capped = np.minimum(rng.integers(1, 12, size=400), 8)  # max_tokens=8 piles up at 8
    fit = fit_counts("rollout output", capped, capped=True)
    assert fit.chosen.dist == "empirical" and "KS" in fit.reason
    assert fit.tail.capped and fit.chosen.cap == 8  # the pile at max_tokens is found
    # An input is never cut: its counts are not screened for a cap.
    assert not fit_counts("rollout input", capped, capped=False).tail.capped
    with_zeros = np.concatenate([capped, np.zeros(20)])
    fit = fit_counts("rollout output", with_zeros, capped=True)
    assert fit.chosen.dist == "empirical" and "zero" in fit.reason
    assert fit.chosen.mean() == pytest.approx(with_zeros.mean())  # zeros kept, not dropped


def test_task_model_writes_prices_from_litellm(two_b: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "priced.toml"
    result = run_pxn("calibrate", *two_b, "-o", out, "--task-model", "gpt-4.1-mini")
    assert result.returncode == 0, result.stderr
    table = tomllib.loads(out.read_text())
    assert table["prices"] == {
        "task_model": "gpt-4.1-mini",
        "reflection_model": "gpt-4.1-mini",  # the task model unless told otherwise
        "task_input": 0.4,
        "task_output": 1.6,
        "reflection_input": 0.4,
        "reflection_output": 1.6,
    }
    assert table["tokens"]["measured_minibatch"] == 2
    assert "gpt-4.1-mini 0.4 / 1.6" in result.stdout
    assert Scenario.load(out).prices.task_output == 1.6


def test_reflection_model_priced_apart() -> None:
    prices = lookup_prices("gpt-4.1-mini", "gpt-4.1")
    assert (prices.task_input, prices.task_output) == (0.4, 1.6)
    assert (prices.reflection_input, prices.reflection_output) == (2.0, 8.0)
    assert lookup_prices(None, None) is None


def test_unknown_model_is_one_line(two_b: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "never.toml"
    result = run_pxn("calibrate", *two_b, "-o", out, "--task-model", "gpt-4.1-mimi")
    assert_user_error(result, "gpt-4.1-mimi", "litellm")
    assert not out.exists()
    result = run_pxn("calibrate", *two_b, "-o", out, "--reflection-model", "gpt-4.1")
    assert_user_error(result, "--reflection-model needs a task model")


def test_traces_without_tokens(tmp_path: Path) -> None:
    runs = write_traces(tmp_path, TRUE, SINGLE, range(2))
    strip_tokens(runs)
    out = tmp_path / "plain.toml"
    result = run_pxn("calibrate", *runs, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "tokens" not in tomllib.loads(out.read_text())
    assert "no [tokens] table: no call in the traces reports its rollout tokens_in" in result.stdout
    # Prices count tokens: asking for them without any is an error, not a silent skip.
    result = run_pxn("calibrate", *runs, "-o", tmp_path / "x.toml", "--task-model", "gpt-4.1-mini")
    assert_user_error(result, "--task-model", "token counts")


def test_recorded_costs_without_a_model_are_noted_not_priced(tmp_path: Path) -> None:
    runs = write_token_traces(tmp_path, TRUE, TOKENS, SINGLE, range(1), cost=0.002)
    calibration = calibrate_traces(runs)
    assert calibration.scenario.prices is None
    assert calibration.costs.dollars > 0
    assert any("not which model to price with" in note for note in calibration.notes)
    # Given a model, the report sets its prices beside what the traces recorded.
    priced = calibrate_traces(runs, task_model="gpt-4.1-mini")
    assert priced.costs.priced is not None and priced.costs.priced > 0
    assert not any("not which model" in note for note in priced.notes)


def test_the_draws_refit_the_token_counts(two_b: list[Path]) -> None:
    cal = calibrate_traces(two_b, draws=40)
    cal.scenario.validate_draws()
    draws = cal.scenario.uncertainty.draws
    for name in ("rollout_input", "rollout_output", "reflection_output"):
        means = [getattr(cal.scenario.with_parameters(d).tokens, name).mean() for d in draws]
        truth = getattr(TOKENS, name).mean()
        # About 1,000 to 8,000 counts each: the draws' means sit within a few % of the truth
        # and spread, but not by more than a tenth.
        assert abs(np.median(means) - truth) / truth < 0.05, name
        assert 0 < np.ptp(means) / truth < 0.1, name
