"""The simulator's fast paths give the numbers of the plain ones, to the bit.

Each shortcut taken for speed (numpy on a stage of many calls, a stage paid
at once, blocks of draws kept as arrays, a parameter draw applied once, a
mean worked out once, the commonest families drawn from numpy without scipy)
is checked against the procedure it stands for, with exact equality: the
committed predictions reproduce from their seeds only if no shortcut moves a
bit.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import numpy as np
import pytest
import scipy.stats
from sim_helpers import EVERYTHING, lognormal, make_scenario

from pxn.acceptance import Acceptance
from pxn.distribution import DIRECT_SAMPLERS, Distribution
from pxn.rate_limits import RateLimit, RateLimits
from pxn.scenario import Uncertainty
from pxn.shape import Shape
from pxn.sim import gepa_rules, search
from pxn.sim.accounting import Accountant, ModelAccount, call_tokens, stage_tokens
from pxn.sim.latency import Draws
from pxn.sim.model import simulate_once
from pxn.sim.presets import load_scenario
from pxn.sim.schedule import Bucket, loaded_makespan, rate_limited_schedule, together
from pxn.sim.stage import total


@pytest.mark.parametrize("seed", range(40))
def test_a_stage_of_many_calls_in_numpy_is_the_list_one(seed: int) -> None:
    """together() on an array: the lengths, the stage's length and its busy time of
    loaded_makespan on the same calls as a list, equal to the bit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 600))
    draws = rng.lognormal(rng.uniform(-1, 4), rng.uniform(0.1, 2), n)
    slowdown = float(rng.choice([0.0, rng.uniform(0, 0.05)]))
    fast, fast_length = together(draws, slowdown)
    plain, plain_length = loaded_makespan(draws.tolist(), n, slowdown)
    assert fast.tolist() == plain
    assert fast_length == plain_length
    assert total(fast) == total(plain)


@pytest.mark.parametrize("seed", range(20))
def test_draws_hand_out_a_stream_and_total_it_as_python_sums_it(seed: int) -> None:
    """Takes and skips of random sizes walk through the blocks as a list would, and
    total() is Python's running sum of every value handed out (numpy's cumsum adds
    in the same order), blocks cut short included."""
    distribution = lognormal(float(np.random.default_rng(seed).uniform(1, 5000)), 0.8)
    draws = Draws(distribution, np.random.default_rng(seed))
    reference = np.random.default_rng(seed)  # the same stream, drawn by hand
    block: list[float] = []
    used, handed_out, total_by_hand = 0, [], 0.0
    sizes = np.random.default_rng(seed + 1000).integers(1, 700, size=60)
    for i, n in enumerate(sizes.tolist()):
        if used + n > len(block):  # a new block; the old one's rest is dropped
            total_by_hand += sum(block[:used])
            block, used = distribution.sample(reference, max(n, Draws.BLOCK)).tolist(), 0
        values = block[used : used + n]
        used += n
        handed_out += values
        if i % 3:
            draws.skip(n)
        else:
            assert draws.take(n).tolist() == values
    assert draws.total() == total_by_hand + sum(block[:used])


LIMITED = make_scenario(
    workers=16,
    tokens=EVERYTHING.tokens,
    rate_limits=RateLimits(task=RateLimit(rpm=300, tpm=90_000), burst_seconds=20),
)


@pytest.mark.parametrize("seed", range(30))
def test_a_stage_paid_at_once_leaves_the_buckets_as_the_schedule_does(seed: int) -> None:
    """ModelAccount.pay_at_start asks what rate_limited_schedule's charges ask: on twin
    accounts, each stage is paid at once by both or by neither, and the buckets
    end equal to the bit; a stage paid at once starts every call at its start."""
    rng = np.random.default_rng(seed)
    ours, theirs = (Accountant(LIMITED, np.random.default_rng(seed)).task for _ in range(2))
    start = 0.0
    for _ in range(40):
        n = int(rng.integers(1, LIMITED.workers + 1))  # a stage that fits its slots
        tokens = ours.draw(n, per_call=True)
        assert tokens is not None
        twin = theirs.draw(n, per_call=True)
        assert all(np.array_equal(a, b) for a, b in zip(tokens, twin, strict=True))
        draws = rng.lognormal(0, 1, n).tolist()
        paid = ours.pay_at_start(n, tokens, start)
        starts, _, _, throttled = rate_limited_schedule(
            draws, LIMITED.workers, start, theirs.charges(tokens)
        )
        if paid:
            assert (starts, throttled) == ([start] * n, 0)
        else:  # the schedule paid call by call; bring ours to the same state
            for mine, its in buckets(ours, theirs):
                mine.level, mine.time = its.level, its.time
        for mine, its in buckets(ours, theirs):
            assert (mine.level, mine.time) == (its.level, its.time)
        start = max(starts) + float(rng.exponential(2.0))


def test_a_draw_is_applied_once_and_not_pickled() -> None:
    """Replicates of one draw run one scenario object, equal to applying the draw anew;
    a pickled scenario leaves its applied draws behind and gives the same runs."""
    base = make_scenario()
    draws = tuple({"rollout.scale": s, "acceptance.a0": a} for s, a in ((1.5, 0.2), (2.5, 0.4)))
    scenario = replace(base, uncertainty=Uncertainty("test", draws))
    assert scenario.for_replicate(0) is scenario.for_replicate(2)
    assert scenario.for_replicate(1) == base.with_parameters(draws[1])
    copy = pickle.loads(pickle.dumps(scenario))
    assert "_applied_draws" not in copy.__dict__
    shape = Shape(2, 2)
    assert [simulate_once(copy, shape, r) for r in range(4)] == [
        simulate_once(scenario, shape, r) for r in range(4)
    ]


def test_a_kept_mean_is_the_mean_worked_out_anew() -> None:
    """A capped distribution's mean is an integral: kept after the first time, and the
    same as a twin's worked out afresh."""
    capped = replace(lognormal(30.0, 1.2), cap=60.0, cap_retries=2)
    first = capped.mean()
    assert capped.mean() == first == replace(capped).mean()
    assert first < 60.0 * 3


def test_the_preset_runs_its_draws_as_scenarios_of_their_own() -> None:
    """A preset's replicate r, through the draws it keeps, equals the scenario with draw
    r mod D applied anew (no uncertainty, nothing kept) run as replicate r."""
    preset = load_scenario("livebench-math")
    assert preset.uncertainty is not None
    for shape in (Shape(1, 1), Shape(2, 2)):
        for r in (0, 1, 201):
            alone = preset.with_parameters(preset.uncertainty.draw_of(r))
            assert simulate_once(preset, shape, r) == simulate_once(alone, shape, r)


def buckets(ours: ModelAccount, theirs: ModelAccount) -> list[tuple[Bucket, Bucket]]:
    """Each bucket of one account beside its twin's."""
    pairs = [(ours.requests, theirs.requests), (ours.token_bucket, theirs.token_bucket)]
    return [(mine, its) for mine, its in pairs if mine is not None and its is not None]


@pytest.mark.parametrize(
    ("dist", "params"),
    [
        ("lognorm", {"s": 0.3, "scale": 9.0}),
        ("lognorm", {"s": 1.7, "loc": 0.4, "scale": 0.2}),
        ("gamma", {"a": 2.0, "scale": 0.7}),
        ("gamma", {"a": 0.4, "loc": 1.0, "scale": 3.0}),
        ("expon", {"scale": 2.5}),
        ("expon", {"loc": 0.1}),
    ],
)
def test_families_drawn_straight_from_numpy_are_scipys_draws(dist: str, params: dict) -> None:
    """DIRECT_SAMPLERS skip scipy's rvs: the same values from the same generator state,
    and the generator left where scipy leaves it."""
    latency = Distribution(dist, params=params)
    for seed, size in [(0, 1), (1, 7), (2, 4096)]:
        ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        drawn = latency.uncapped_sample(ours, size)
        expected = getattr(scipy.stats, dist).rvs(size=size, random_state=theirs, **params)
        assert np.array_equal(drawn, expected)
        assert ours.random() == theirs.random()
    assert dist in DIRECT_SAMPLERS


@pytest.mark.parametrize("seed", range(10))
def test_a_stages_busy_time_is_numpys_sum_to_the_bit(seed: int) -> None:
    """total() of a list of any length (summed pairwise in Python up to 128) equals
    numpy's sum of the same values, to the bit."""
    rng = np.random.default_rng(seed)
    for n in [*range(1, 140), 255, 600]:
        values = rng.lognormal(rng.uniform(-2, 6), rng.uniform(0.1, 2.5), n)
        assert total(values.tolist()) == float(np.add.reduce(values))
        assert total(values) == float(np.add.reduce(values))


@pytest.mark.parametrize("p", range(1, 9))
def test_parents_drawn_one_by_one_are_the_parents_drawn_at_once(
    p: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few parents are drawn with numpy's scalar draw, one each: the same parents,
    and the same stream after them, as one draw of p."""
    scenario = make_scenario(front_share=0.5)
    runs = []
    for one_by_one in (0, 8):
        monkeypatch.setattr(search, "SCALAR_DRAWS", one_by_one)
        choices = gepa_rules.GepaChoices(scenario, Shape(p, 2), np.random.default_rng(p))
        tasks = []
        for iteration in range(1, 60):
            choices.search.candidates = iteration  # a growing pool, so the bound changes
            tasks.append(choices.sample_tasks(iteration))
        runs.append((tasks, choices.rng.random()))
    assert runs[0] == runs[1]


def test_a_steps_acceptance_in_math_is_numpys_within_an_ulp_of_the_exponential() -> None:
    """Acceptance.probability of one step (math.exp) against numpy's array form: equal
    to the bit where numpy's exp is the C library's; where a CPU's vector units compute
    it (numpy's AVX-512 exp, as on an Intel Xeon of 2026-12-06) the two exponentials
    differ by up to an ulp, and a0 times each, rounded, by up to 2**-51 relative."""
    acceptance = Acceptance(0.4, tau=350.0, decay_until=900.0)
    made = np.arange(0, 2000, 3)
    arrayed = acceptance.probability(made)
    for m, a in zip(made.tolist(), arrayed.tolist(), strict=True):
        assert math.isclose(acceptance.probability(m), a, rel_tol=2**-51, abs_tol=0)


@pytest.mark.parametrize("seed", range(5))
def test_a_stages_tokens_are_its_calls_tokens_added_in_order(seed: int) -> None:
    """stage_tokens (numpy's accumulate over many calls) is Python's running sum of each
    call's tokens in plus out, to the bit; for rollouts and for reflections, whose
    input is one number."""
    rng = np.random.default_rng(seed)
    for n in range(1, 300, 7):
        tokens_out = rng.lognormal(6, 1.2, n)
        for tokens_in in (rng.lognormal(7, 0.8, n), float(rng.uniform(100, 5000))):
            ins = np.broadcast_to(tokens_in, n).tolist()
            each = [a + b for a, b in zip(ins, tokens_out.tolist(), strict=True)]
            assert call_tokens((tokens_in, tokens_out)) == each
            assert stage_tokens((tokens_in, tokens_out)) == sum(each)
