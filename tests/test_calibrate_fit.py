"""Latency fits: MLE per family, AIC choice, KS, small samples and their uncertainty."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from pxn.calibrate.traces.fit import MIN_FIT_POINTS, fit_latency, mle_params
from pxn.errors import PxnError


def draws(dist, n: int, seed: int = 1) -> np.ndarray:
    return dist.rvs(size=n, random_state=np.random.default_rng(seed))


@pytest.mark.parametrize(
    ("family", "params"),
    [
        ("lognorm", {"s": 0.6, "scale": 3.0}),
        ("gamma", {"a": 2.0, "scale": 1.5}),
        ("weibull_min", {"c": 3.0, "scale": 4.0}),
        ("expon", {"scale": 2.5}),
    ],
)
def test_each_family_is_recovered_and_chosen(family: str, params: dict[str, float]) -> None:
    data = draws(getattr(scipy.stats, family)(**params), 3000)
    fit = fit_latency("rollout", data)
    assert fit.chosen.dist == family, [(f.family, f.aic) for f in fit.fits]
    for name, truth in params.items():
        assert fit.chosen.params[name] == pytest.approx(truth, rel=0.08)
    assert fit.fit_of(family).ks_pvalue > 0.01
    assert [f.aic for f in fit.fits] == sorted(f.aic for f in fit.fits)


@pytest.mark.parametrize("sample", [[2.0, 2.0, 2.0], [1.0, 1.0001, 1.0, 1.00005]])
def test_a_weibull_fit_to_a_sample_with_almost_no_spread_is_a_point_mass(sample) -> None:
    # A bootstrap resample of a few tied latencies looks like this: the MLE's
    # shape has no finite root, and the fit must still return (CI saw brentq fail).
    params = mle_params("weibull_min", np.array(sample))
    assert params["c"] >= 1e4
    assert params["scale"] == pytest.approx(max(sample), rel=1e-4)


def test_small_sample_works_and_says_it_is_uncertain() -> None:
    dist = scipy.stats.lognorm(s=0.5, scale=2.0)
    small = fit_latency("reflection", draws(dist, 20))
    large = fit_latency("reflection", draws(dist, 2000))
    assert small.n == 20 and small.fits  # tens of points still get family fits
    assert small.mean_ci[0] < small.mean < small.mean_ci[1]
    assert small.relative_uncertainty > 3 * large.relative_uncertainty
    low, high = small.param_ci["s"] if small.chosen.dist == "lognorm" else (0, np.inf)
    assert low < high
    # The truth sits inside the small sample's interval of the mean.
    assert small.mean_ci[0] < dist.mean() < small.mean_ci[1]


def test_too_few_points_resample_instead() -> None:
    fit = fit_latency("reflection", [3.0, 4.0, 5.0])
    assert MIN_FIT_POINTS > 3
    assert fit.chosen.dist == "empirical"
    assert fit.chosen.samples == (3.0, 4.0, 5.0)
    assert "too few" in fit.reason
    one = fit_latency("reflection", [7.5])
    assert one.chosen.mean() == 7.5 and one.mean_ci == (7.5, 7.5)


def test_non_positive_latencies_are_set_aside_and_counted() -> None:
    data = [*draws(scipy.stats.gamma(a=3.0), 50), 0.0, -1.0, float("nan")]
    fit = fit_latency("rollout", data)
    assert fit.dropped == 3 and fit.n == 50


def test_no_family_fits_a_bimodal_sample_so_auto_resamples() -> None:
    rng = np.random.default_rng(3)
    data = np.concatenate([rng.normal(1.0, 0.05, 1500), rng.normal(10.0, 0.5, 1500)])
    fit = fit_latency("rollout", data)
    assert fit.chosen.dist == "empirical"
    assert "rejected by KS" in fit.reason
    assert all(f.ks_pvalue < 0.01 for f in fit.fits)


def test_explicit_choices() -> None:
    data = draws(scipy.stats.gamma(a=3.0), 200)
    assert fit_latency("r", data, "expon").chosen.dist == "expon"
    assert fit_latency("r", data, "empirical").chosen.dist == "empirical"
    with pytest.raises(PxnError, match="latency choice"):
        fit_latency("r", data, "normal")
    with pytest.raises(PxnError, match="choose empirical"):
        fit_latency("r", [1.0, 2.0], "gamma")
    with pytest.raises(PxnError, match="no positive latencies"):
        fit_latency("r", [0.0, -2.0])
