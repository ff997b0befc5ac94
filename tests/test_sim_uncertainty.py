"""Parameter uncertainty in a prediction: the interval spans the draws, and says how much.

A scenario's draws are sets of parameter values; replicate r runs draw r mod D.
The prediction's interval then mixes the parameters' spread with run-to-run
noise, and its split tells them apart (law of total variance). Every test is
seeded, so each is deterministic; the thresholds leave the margins stated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields

import numpy as np
import pytest
from sim_helpers import fixed, make_scenario

from pxn.acceptance import Acceptance
from pxn.prices import Prices
from pxn.scenario import Scenario, Uncertainty
from pxn.shape import Shape
from pxn.sim.advise import Ask
from pxn.sim.advise_search import advise
from pxn.sim.backends import LocalBackend
from pxn.sim.model import simulate_once
from pxn.sim.predict import Interval, split, sweep
from pxn.tokens import Tokens

SHAPE = Shape(2, 2)
BASE = make_scenario()
SCALE = BASE.rollout.params["scale"]


def with_draws(scenario: Scenario, path: str, values: list[float]) -> Scenario:
    return scenario.replace(uncertainty=Uncertainty("test", tuple({path: v} for v in values)))


def rollout_scales(low: float, high: float, draws: int = 10) -> Scenario:
    """BASE with its rollout latency's scale drawn from low to high times its own."""
    return with_draws(BASE, "rollout.scale", list(SCALE * np.geomspace(low, high, draws)))


def test_draws_that_differ_widely_widen_the_interval_and_own_its_variance() -> None:
    [point] = sweep(BASE, [SHAPE], 100)
    [wide] = sweep(rollout_scales(0.5, 2.0), [SHAPE], 100)  # 10 replicates per draw
    [narrow] = sweep(rollout_scales(0.98, 1.02), [SHAPE], 100)

    def width(interval: Interval) -> float:
        return interval.high - interval.low

    # Measured: 241 s against 81 s, parameter shares 0.88 and 0.0.
    assert width(wide.wall_clock) > 2 * width(point.wall_clock)
    assert wide.draws == 10 and wide.wall_clock_split is not None
    assert wide.wall_clock_split.parameter_share > 0.7
    assert narrow.wall_clock_split is not None
    assert narrow.wall_clock_split.parameter_share < 0.2
    # Run-to-run noise alone is about as wide as the point estimate's interval,
    # far narrower than the interval over the parameters.
    noise = wide.wall_clock_split.noise
    assert noise.mean == wide.wall_clock.mean
    assert width(noise) == pytest.approx(width(point.wall_clock), rel=0.35)
    assert width(noise) < 0.5 * width(wide.wall_clock)


def test_split_recovers_a_known_share_of_variance() -> None:
    # Draw means with variance 4, noise with variance 1: the parameters own 4/5.
    rng = np.random.default_rng(3)
    draws, per_draw = 60, 10
    means = rng.normal(0.0, 2.0, draws)
    values = [means[r % draws] + rng.normal(0.0, 1.0) for r in range(draws * per_draw)]
    result = split(values, draws)
    assert result is not None
    # The estimate's standard error here is ~0.03; 0.1 is over three of them.
    assert result.parameter_share == pytest.approx(0.8, abs=0.1)
    # The noise's 5-95% spread is +-1.645 standard deviations around the mean.
    assert result.noise.high - result.noise.mean == pytest.approx(1.645, abs=0.2)
    assert result.noise.mean - result.noise.low == pytest.approx(1.645, abs=0.2)
    # Noise alone, no parameter effect: the share is floored at 0, never negative.
    noise_only = split(list(rng.normal(0.0, 1.0, 600)), draws)
    assert noise_only is not None and 0.0 <= noise_only.parameter_share < 0.05


def test_constant_latencies_put_all_the_spread_in_the_parameters() -> None:
    constant = make_scenario(rollout=fixed(2.0), reflection=fixed(10.0), acceptance=Acceptance(0))
    scenario = with_draws(constant, "rollout.scale", [1.0, 1.5, 3.0])
    [p] = sweep(scenario, [SHAPE], 6)
    walls = [simulate_once(scenario, SHAPE, r).wall_clock for r in range(6)]
    assert len(set(walls)) == 3  # one wall-clock per draw, repeated exactly
    assert p.wall_clock_split is not None
    assert p.wall_clock_split.parameter_share == 1.0
    mean = float(np.mean(walls))
    assert p.wall_clock_split.noise == Interval(mean, mean, mean)


def test_without_draws_a_prediction_is_the_replicates_own_figures() -> None:
    [p] = sweep(BASE, [SHAPE], 30)
    runs = [simulate_once(BASE, SHAPE, r) for r in range(30)]
    assert p.wall_clock == Interval.of([r.wall_clock for r in runs])
    assert p.iterations == Interval.of([r.iterations for r in runs])
    assert (p.draws, p.wall_clock_split, p.dollars_split, p.notes) == (0, None, None, ())
    # A draw that sets a parameter to its own value changes nothing, to the bit.
    same = with_draws(BASE, "rollout.scale", [SCALE])
    [q] = sweep(same, [SHAPE], 30)
    assert q.wall_clock == p.wall_clock and q.dollars == p.dollars
    assert q.draws == 1 and q.wall_clock_split is not None
    assert q.wall_clock_split.parameter_share == 0.0


@pytest.mark.parametrize(
    ("replicates", "split_known", "fragment"),
    [
        (5, False, "5 replicates ran only 5 of the scenario's 10 parameter draws"),
        (10, False, "10 replicates ran each of the scenario's 10 parameter draws once"),
        (15, True, "15 replicates over 10 parameter draws: some draws ran once"),
        (20, True, None),
    ],
)
def test_too_few_replicates_per_draw_are_said(
    replicates: int, split_known: bool, fragment: str | None
) -> None:
    [p] = sweep(rollout_scales(0.5, 2.0), [SHAPE], replicates)
    assert p.draws == min(10, replicates)
    assert (p.wall_clock_split is not None) == split_known
    if fragment is None:
        assert p.notes == ()
    else:
        [note] = p.notes
        assert fragment in note and "20 replicates or more (a multiple of 10)" in note


def priced(scenario: Scenario) -> Scenario:
    tokens = Tokens(fixed(100), fixed(20), fixed(300), 500.0, 120.0, measured_minibatch=3)
    return scenario.replace(tokens=tokens, prices=Prices(1.0, 4.0, 2.0, 8.0))


def test_dollars_split_by_the_draws_too() -> None:
    # A reflection's output tokens, a constant per draw: the draws move every run's dollars,
    # the runs' own noise only through how many proposals they make.
    scenario = with_draws(priced(BASE), "tokens.reflection_output.scale", [0.5, 1.0, 2.0, 4.0])
    [p] = sweep(scenario, [SHAPE], 40)
    assert p.dollars is not None and p.dollars_split is not None
    [point] = sweep(priced(BASE), [SHAPE], 40)
    assert p.dollars.high - p.dollars.low > 2 * (point.dollars.high - point.dollars.low)
    assert p.dollars_split.parameter_share > 0.7


def strict_json(data: object) -> str:
    return json.dumps(data, allow_nan=False)


@pytest.mark.parametrize(
    "scenario",
    [BASE, rollout_scales(0.5, 2.0), priced(rollout_scales(0.5, 2.0))],
    ids=["no draws", "draws", "draws and prices"],
)
def test_every_prediction_field_is_json_without_nan(scenario: Scenario) -> None:
    for replicates in (3, 40):  # too few for a split, and enough
        for p in sweep(scenario, [SHAPE, Shape(1, 1)], replicates):
            strict_json(asdict(p))
    # advise simulates no single: its predictions have no speedup, and say so with None.
    ask = Ask(400, (1, 2), (2,), (3,), (8,), replicates=4)
    for x in advise(scenario, ask).assessments:
        assert x.prediction.speedup is None
        strict_json(asdict(x.prediction))
    assert {f.name for f in fields(x.prediction)} >= {"draws", "wall_clock_split", "notes"}


def test_same_seed_same_bits_whatever_the_jobs() -> None:
    scenario = priced(rollout_scales(0.5, 2.0))
    shapes = [SHAPE, Shape(4, 1)]
    alone = sweep(scenario, shapes, 60, jobs=1)
    assert sweep(scenario, shapes, 60, jobs=2) == alone
    with LocalBackend(2) as backend:
        assert sweep(scenario, shapes, 60, backend=backend) == alone
    assert sweep(scenario.replace(seed=8), shapes, 60) != alone
