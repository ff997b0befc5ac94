"""Bounded tails: a pile-up at a cap is found, fitted censored, and written as `cap`.

Tolerances: with 2,000 gamma latencies (a = 3) of which about 8% are cut, the
censored MLE knows a and scale to about 4%; the tolerance is 8%. The screen
runs at significance 1e-3 on every sample, so across the 60 uncapped samples
below a false cap is expected 0.06 times.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from calibrate_helpers import TRUE, add_timeout_attempts, relative, write_traces

from pxn.calibrate.traces.fit import fit_latency
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.distribution import Distribution
from pxn.shape import Shape

# Calibration round trips on simulated traces: seconds each, so outside `make quick`.
pytestmark = pytest.mark.slow

GAMMA = scipy.stats.gamma(a=3.0, scale=0.7)
CAP = 4.0  # P(X > 4) = 8%


def test_a_pile_at_the_cap_is_found_and_fitted_censored() -> None:
    latencies = np.minimum(GAMMA.rvs(size=2000, random_state=1), CAP)
    fit = fit_latency("rollout", latencies)
    assert fit.tail.capped, fit.tail.reason
    assert fit.tail.cap == CAP and fit.chosen.cap == CAP and fit.chosen.cap_retries == 0
    assert fit.tail.pvalue < 1e-10
    assert fit.chosen.dist == "gamma"
    assert relative(fit.chosen.params["a"], 3.0) < 0.08
    assert relative(fit.chosen.params["scale"], 0.7) < 0.08
    # The capped distribution's mean is the sample's: the pile is part of the model.
    assert relative(fit.chosen.mean(), latencies.mean()) < 0.02
    # Ignoring the cap would fit a thinner distribution.
    uncensored = scipy.stats.gamma.fit(latencies, floc=0)
    assert uncensored[0] > 3.3


def test_a_cap_reached_with_jitter_is_found_too() -> None:
    """Replies cut at max_tokens end within a little of one another, not at one instant."""
    rng = np.random.default_rng(2)
    latencies = GAMMA.rvs(size=1500, random_state=2)
    over = latencies > CAP
    latencies[over] = CAP * (1 + rng.uniform(0, 0.01, size=int(over.sum())))
    fit = fit_latency("reflection", latencies)
    assert fit.tail.capped, fit.tail.reason
    assert CAP <= fit.chosen.cap <= CAP * 1.01


@pytest.mark.parametrize(
    "dist",
    [
        scipy.stats.gamma(a=3.0, scale=0.7),
        scipy.stats.lognorm(s=0.6, scale=2.0),
        scipy.stats.weibull_min(c=1.5, scale=2.0),
    ],
)
def test_uncapped_latencies_are_not_called_capped(dist) -> None:
    for seed in range(20):
        fit = fit_latency("rollout", dist.rvs(size=400, random_state=seed))
        assert not fit.tail.capped, (seed, fit.tail.reason)
        assert fit.chosen.cap is None


def test_round_trip_of_a_capped_rollout(tmp_path: Path) -> None:
    capped = TRUE.replace(rollout=Distribution("gamma", params={"a": 3.0, "scale": 0.7}, cap=CAP))
    cal = calibrate_traces(write_traces(tmp_path, capped, Shape(1, 1), range(2)))
    rollout = cal.scenario.rollout
    assert rollout.cap == pytest.approx(CAP) and rollout.cap_retries == 0
    assert relative(rollout.params["a"], 3.0) < 0.08
    assert relative(rollout.params["scale"], 0.7) < 0.08
    assert not cal.reflection.tail.capped
    assert relative(rollout.mean(), capped.rollout.mean()) < 0.03


def test_timed_out_tries_give_the_cap_and_its_retries(tmp_path: Path) -> None:
    """A client timeout of 4 s with 2 retries; the runner's Attempt events show each cut try."""
    timeout = Distribution("gamma", params={"a": 3.0, "scale": 0.7}, cap=CAP, cap_retries=2)
    runs = write_traces(tmp_path, TRUE.replace(rollout=timeout), Shape(1, 1), range(2))
    assert add_timeout_attempts(runs, CAP) > 300
    cal = calibrate_traces(runs)
    rollout, tail = cal.scenario.rollout, cal.rollout.tail
    assert tail.timed_out > 300 and "retried" in tail.reason
    assert rollout.cap == pytest.approx(CAP) and rollout.cap_retries == 2
    assert relative(rollout.params["a"], 3.0) < 0.08
    assert relative(rollout.params["scale"], 0.7) < 0.08
    assert relative(rollout.mean(), timeout.mean()) < 0.03
