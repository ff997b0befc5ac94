"""Dollars, provider rate limits and the reflection minibatch's effect, in the simulator.

The rate-limited model is checked three ways: against the per-call oracle
(tests/oracle.py, token buckets modelled there on their own) in distribution
and exactly on a deterministic run; against the token bucket's own promise
on a simulated trace (no 60 s window holds more starts than the limit plus
the burst); and against the closed form's rate bound. Dollars are checked
against an exact count, and scenarios without prices or limits against
their old results, to the bit.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from oracle import oracle_replicates
from scipy.stats import ks_2samp
from sim_helpers import fixed, lognormal, make_scenario, shared_pool
from test_core_trace import header

from pxn.acceptance import Acceptance
from pxn.api.prediction_report import dollars_text, predictions_report, predictions_table
from pxn.api.report import csv_text, json_text
from pxn.load import Load, Loads
from pxn.prices import Prices
from pxn.rate_limits import RateLimit, RateLimits
from pxn.run_summary import summarize
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.analytic import analytic
from pxn.sim.model import simulate_once
from pxn.sim.predict import Interval, sweep
from pxn.sim.schedule import Bucket, list_schedule, rate_limited_schedule
from pxn.tokens import Tokens
from pxn.trace import Reflection, Rollout, RunEnd, Stage, TraceWriter
from pxn.trace_reading import read_trace

REPLICATES = 300
ALPHA = 0.001

# Lognormal token counts; a reflection reads 800 + 200 b tokens and was measured
# at b = 1, so at b = 3 it reads 400 more and takes 0.005 s per token longer: 2 s.
TOKENS = Tokens(
    rollout_input=lognormal(600.0),
    rollout_output=lognormal(200.0, 0.8),
    reflection_output=lognormal(400.0),
    reflection_input_base=800.0,
    reflection_input_per_example=200.0,
    measured_minibatch=1,
    reflection_seconds_per_input_token=0.005,
)
PRICES = Prices(task_input=0.5, task_output=2.0, reflection_input=1.0, reflection_output=4.0)

LIMITED: dict[str, tuple[Scenario, Shape]] = {
    # W=64 could start 1900 rollouts a minute; the provider allows 150.
    "task rpm, W far above it": (
        make_scenario(
            workers=64, rate_limits=RateLimits(task=RateLimit(rpm=150), burst_seconds=10)
        ),
        Shape(4, 2),
    ),
    # Tokens per minute on rollouts, requests per minute on the 8 reflections of a
    # step (4 in the bucket), priced, and the reflection shifted for its b.
    "task tpm, reflection rpm, priced": (
        make_scenario(
            workers=32,
            tokens=TOKENS,
            prices=PRICES,
            rate_limits=RateLimits(
                task=RateLimit(tpm=60_000), reflection=RateLimit(rpm=12), burst_seconds=20
            ),
        ),
        Shape(8, 1),
    ),
    # A 2 s burst holds 800 tokens: many rollouts need more, wait for a full
    # bucket and leave it in debt.
    "oversized calls": (
        make_scenario(
            workers=32,
            tokens=TOKENS,
            rate_limits=RateLimits(task=RateLimit(rpm=600, tpm=24_000), burst_seconds=2),
        ),
        Shape(2, 2),
    ),
    # A local pool under provider limits: rollouts on 5 of the 16 workers' servers,
    # slowed by the calls in flight at each throttled start; reflections likewise.
    "local pool and limits": (
        make_scenario(
            workers=16,
            loads=Loads(Load(servers=5, slowdown=0.3), Load(servers=3, slowdown=0.2)),
            tokens=TOKENS,
            rate_limits=RateLimits(
                task=RateLimit(rpm=40, tpm=100_000), reflection=RateLimit(rpm=6), burst_seconds=5
            ),
        ),
        Shape(4, 1),
    ),
}


def close_means(a: list[float], b: list[float]) -> bool:
    """Means within four standard errors of their difference (or exactly equal)."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    se = np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
    return abs(x.mean() - y.mean()) <= 4 * se + 1e-9


# -- against the per-call oracle ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LIMITED))
def test_rate_limited_model_matches_the_per_call_oracle(name: str) -> None:
    scenario, shape = LIMITED[name]
    fast = [simulate_once(scenario, shape, r) for r in range(REPLICATES)]
    oracle = oracle_replicates(scenario, shape, REPLICATES)
    result = ks_2samp([r.wall_clock for r in fast], [r.wall_clock for r in oracle])
    assert result.pvalue > ALPHA, f"wall-clock distributions differ: {result}"
    for field in ("iterations", "metric_calls", "throttled_calls"):
        ours, theirs = [getattr(r, field) for r in fast], [getattr(r, field) for r in oracle]
        assert close_means(ours, theirs), f"{field}: {np.mean(ours)} vs {np.mean(theirs)}"
    if scenario.prices is not None:
        assert close_means([r.dollars for r in fast], [r.dollars for r in oracle])
    # The limits bind in every one of these: far slower than without them.
    unlimited = [
        simulate_once(scenario.replace(rate_limits=RateLimits()), shape, r).wall_clock
        for r in range(50)
    ]
    assert np.mean([r.wall_clock for r in fast]) > 1.4 * np.mean(unlimited)
    assert min(r.throttled_calls for r in fast) > 0


@pytest.mark.slow
def test_the_comparison_sees_a_limit_one_fifth_higher() -> None:
    """The KS check has power here too: 180 rpm in the oracle against 150 is detected."""
    scenario, shape = LIMITED["task rpm, W far above it"]
    fast = [simulate_once(scenario, shape, r) for r in range(REPLICATES)]
    looser = scenario.replace(rate_limits=RateLimits(RateLimit(rpm=180), burst_seconds=10))
    oracle = oracle_replicates(looser, shape, REPLICATES)
    assert ks_2samp([r.wall_clock for r in fast], [r.wall_clock for r in oracle]).pvalue < ALPHA


@pytest.mark.parametrize(
    ("limits", "loads"),
    [
        (RateLimits(task=RateLimit(rpm=120)), Loads()),
        (
            RateLimits(
                task=RateLimit(rpm=300, tpm=20_000), reflection=RateLimit(rpm=6), burst_seconds=10
            ),
            Loads(),
        ),
        (
            RateLimits(task=RateLimit(tpm=3000), reflection=RateLimit(tpm=2000), burst_seconds=5),
            Loads(),
        ),
        (RateLimits(task=RateLimit(rpm=30), burst_seconds=5), shared_pool(4, 0.5)),
        (
            RateLimits(task=RateLimit(rpm=200, tpm=20_000), reflection=RateLimit(rpm=6)),
            Loads(Load(servers=6, slowdown=0.25), Load(slowdown=0.5)),
        ),
    ],
    ids=["rpm", "rpm tpm reflection rpm", "tpm both", "rpm on a pool", "both on loads"],
)
def test_oracle_agrees_exactly_on_a_deterministic_limited_run(
    limits: RateLimits, loads: Loads
) -> None:
    """Fixed latencies, tokens and acceptance: the two models give the same numbers."""
    tokens = Tokens(fixed(300.0), fixed(100.0), fixed(200.0), 1000.0, 150.0, 3, 0.01)
    scenario = make_scenario(
        rollout=fixed(1.5),
        reflection=fixed(4.0),
        acceptance=Acceptance(1.0),
        workers=16,
        reflection_concurrency=3,
        tokens=tokens,
        prices=PRICES,
        rate_limits=limits,
        loads=loads,
    )
    [fast] = [simulate_once(scenario, Shape(2, 2), 0)]
    [oracle] = oracle_replicates(scenario, Shape(2, 2), 1)
    assert fast.wall_clock == pytest.approx(oracle.wall_clock, rel=1e-9)
    assert fast.throttled_calls == oracle.throttled_calls > 0
    assert fast.dollars == pytest.approx(oracle.dollars, rel=1e-12)
    assert (fast.iterations, fast.metric_calls) == (oracle.iterations, oracle.metric_calls)


# -- W = 512 against 500 requests a minute ------------------------------------------


def test_512_workers_against_500_rpm_are_throttled(tmp_path: Path) -> None:
    scenario = make_scenario(
        workers=512,
        budget=5000,
        valset_size=200,
        trainset_size=200,
        acceptance=Acceptance(0.2),
        reflection_concurrency=16,
    )
    limited = scenario.replace(rate_limits=RateLimits(task=RateLimit(rpm=500)))  # burst: 60 s
    shape = Shape(4, 4)
    free = [simulate_once(scenario, shape, r) for r in range(5)]
    runs = [simulate_once(limited, shape, r) for r in range(5)]
    rate_bound = analytic(limited, shape).rate_bound
    assert rate_bound == pytest.approx((5000 - 500) / (500 / 60))
    assert np.mean([r.wall_clock for r in runs]) > 1.8 * np.mean([r.wall_clock for r in free])
    assert min(r.wall_clock for r in runs) >= 0.99 * rate_bound
    assert all(r.throttled_calls / (r.metric_calls + r.proposals) > 0.2 for r in runs)
    assert all(r.throttled_calls == 0 for r in free)
    # W hardly matters once the provider is the bottleneck.
    fewer = np.mean(
        [simulate_once(limited.replace(workers=64), shape, r).wall_clock for r in range(5)]
    )
    assert fewer == pytest.approx(np.mean([r.wall_clock for r in runs]), rel=0.1)

    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as writer:
        simulate_once(limited, shape, 0, writer)
    trace = read_trace(path)
    starts = np.sort([r.start for r in trace.of(Rollout)])
    # No 60 s window holds more starts than the limit plus the burst (500 + 500)...
    in_window = np.searchsorted(starts, starts + 60.0, side="left") - np.arange(len(starts))
    assert in_window.max() <= 1000
    # ... after the first minute the bucket holds the rate to 500 a minute (plus the
    # burst it can save up during reflections) ...
    end = starts[-1]
    later = starts[starts >= 60.0]
    assert len(later) <= 500 * (end - 60.0) / 60 + 500
    # ... and the whole run keeps to it: at most the burst plus 500 a minute.
    assert len(starts) <= 500 + 500 * end / 60
    # The limit binds: over the run the provider's allowance is nearly all used.
    assert len(later) >= 0.9 * 500 * (end - 60.0) / 60


# -- dollars ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2), Shape(4, 1)])
def test_dollars_are_the_exact_count_with_constant_tokens(shape: Shape) -> None:
    tokens = Tokens(fixed(700.0), fixed(120.0), fixed(450.0), 900.0, 250.0, 3)
    prices = Prices(task_input=0.4, task_output=1.6, reflection_input=2.5, reflection_output=10.0)
    scenario = make_scenario(tokens=tokens, prices=prices, skip_perfect=0.2)
    per_rollout = (700 * 0.4 + 120 * 1.6) / 1e6
    per_reflection = ((900 + 250 * 3) * 2.5 + 450 * 10.0) / 1e6
    for replicate in range(3):
        run = simulate_once(scenario, shape, replicate)
        exact = run.metric_calls * per_rollout + run.proposals * per_reflection
        assert run.dollars == pytest.approx(exact, rel=1e-12)
        assert run.proposals > 0


def test_pricing_a_run_leaves_its_timing_to_the_bit() -> None:
    """Tokens are drawn from a stream of their own, and only when something uses them."""
    plain = make_scenario(rollout=lognormal(2.0, 0.8))
    no_shift = Tokens(
        TOKENS.rollout_input, TOKENS.rollout_output, TOKENS.reflection_output, 800.0, 200.0, 3
    )
    for variant in (
        plain.replace(tokens=no_shift),  # tokens alone draw nothing
        plain.replace(tokens=no_shift, prices=PRICES),
        plain.replace(rate_limits=RateLimits(burst_seconds=30)),  # no limit in it
    ):
        for replicate in range(5):
            ours, theirs = (simulate_once(s, Shape(2, 2), replicate) for s in (variant, plain))
            assert ours.wall_clock == theirs.wall_clock
            assert ours.stage_time == theirs.stage_time
            assert (ours.iterations, ours.accepted) == (theirs.iterations, theirs.accepted)
            assert ours.throttled_calls == 0
            assert (ours.dollars is None) == (variant.prices is None)


def test_a_limit_that_never_binds_changes_nothing() -> None:
    scenario = make_scenario()
    roomy = scenario.replace(
        rate_limits=RateLimits(task=RateLimit(rpm=1e9), reflection=RateLimit(rpm=1e9))
    )
    for replicate in range(5):
        ours, theirs = (simulate_once(s, Shape(2, 2), replicate) for s in (roomy, scenario))
        assert ours.wall_clock == pytest.approx(theirs.wall_clock, rel=1e-12)
        assert ours.throttled_calls == 0


# -- the reflection minibatch b -------------------------------------------------


@pytest.mark.parametrize("b", [1, 3, 5])
def test_a_larger_minibatch_lengthens_each_reflection_by_the_predicted_shift(b: int) -> None:
    tokens = Tokens(fixed(500.0), fixed(100.0), fixed(300.0), 1000.0, 100.0, 3, 0.01)
    scenario = make_scenario(reflection=fixed(10.0), tokens=tokens, minibatch=b, stage_overhead=0.0)
    shift = tokens.reflection_latency_shift(b)
    assert shift == pytest.approx(0.01 * 100 * (b - 3))
    run = simulate_once(scenario, Shape(2, 2), 0)
    # k = 4 <= C: each iteration's reflection stage is one reflection long.
    assert run.stage_time["reflection"] / run.iterations == pytest.approx(10.0 + shift)
    shifted, unshifted = (
        analytic(scenario, Shape(2, 2)),
        analytic(scenario.replace(tokens=None), Shape(2, 2)),
    )
    assert shifted.l_step - unshifted.l_step == pytest.approx(shift)


def test_a_negative_shift_is_floored_at_zero() -> None:
    tokens = Tokens(fixed(500.0), fixed(100.0), fixed(300.0), 1000.0, 100.0, 5, 0.05)
    scenario = make_scenario(reflection=fixed(10.0), tokens=tokens, minibatch=1)
    assert tokens.reflection_latency_shift(1) == pytest.approx(-20.0)
    run = simulate_once(scenario, Shape(2, 2), 0)
    assert run.stage_time["reflection"] == 0.0
    assert analytic(scenario, Shape(2, 2)).l_step == pytest.approx(
        analytic(scenario.replace(reflection=fixed(0.0), tokens=None), Shape(2, 2)).l_step
    )


# -- the schedule and the closed form --------------------------------------------


def test_unlimited_rate_limited_schedule_is_the_list_schedule() -> None:
    rng = np.random.default_rng(3)
    durations = rng.exponential(2.0, 40).tolist()
    starts, slots, used, throttled = rate_limited_schedule(durations, 6, 0.0, [])
    assert (starts, slots, throttled) == (*list_schedule(durations, 6), 0)
    assert used is durations
    # With a slowdown every call starts among min(n, slots) (the unlimited model's rule).
    for n in (4, 40):
        starts, slots, slowed, _ = rate_limited_schedule(durations[:n], 6, 0.0, [], 0.5)
        want = [d * (1 + 0.5 * (min(n, 6) - 1)) for d in durations[:n]]
        assert slowed == pytest.approx(want, rel=1e-12)
        want_starts, want_slots = list_schedule(want, 6)
        assert starts == pytest.approx(want_starts, rel=1e-12)
        assert slots == want_slots


def test_a_bucket_paces_calls_and_an_oversized_call_goes_into_debt() -> None:
    # 60 rpm with a 3 s burst: 3 calls at once, then one a second.
    bucket = Bucket(60, 3)
    starts, _, _, throttled = rate_limited_schedule([0.1] * 6, 10, 5.0, [(bucket, [1.0] * 6)])
    assert starts == pytest.approx([5.0, 5.0, 5.0, 6.0, 7.0, 8.0])
    assert throttled == 3
    # 600 tokens a minute (10 a second), a 1 s burst: 10 tokens held. A call of 25
    # waits for a full bucket, leaves it at -15; the next call of 5 waits 2 s more.
    tokens = Bucket(600, 1)
    starts, _, _, _ = rate_limited_schedule([1.0] * 3, 4, 0.0, [(tokens, [4.0, 25.0, 5.0])])
    assert starts == pytest.approx([0.0, 0.4, 2.4])
    # The state carries into the next stage, which starts later.
    starts, _, _, _ = rate_limited_schedule([1.0], 4, 10.0, [(tokens, [10.0])])
    assert starts == pytest.approx([10.0])


def test_a_stage_its_buckets_hold_starts_at_once_and_pays_its_whole_ask() -> None:
    """600 tokens a minute (10 a second), 6 s burst: 60 held. 10 calls of 5 all start;
    a second later the bucket holds 10 + 10 = 20: four calls start, then one each 0.5 s."""
    tokens = Bucket(600, 6)
    starts, slots, _, throttled = rate_limited_schedule([1.0] * 10, 16, 2.0, [(tokens, 5.0)])
    assert (starts, slots, throttled) == ([2.0] * 10, list(range(10)), 0)
    assert (tokens.level, tokens.time) == (10.0, 2.0)
    starts, _, _, throttled = rate_limited_schedule([1.0] * 10, 16, 3.0, [(tokens, 5.0)])
    assert starts == pytest.approx([3.0] * 4 + [3.5, 4.0, 4.5, 5.0, 5.5, 6.0])
    assert throttled == 6


def test_a_throttled_stage_is_slowed_by_the_calls_in_flight_at_each_start() -> None:
    """60 rpm, 3 s burst, 1 s calls, slowdown 0.5: three start together (x2), then one a second.

    The call at 6 s starts while the first three (ending at 7 s) run: 4 in flight,
    x2.5, ends at 8.5; at 7 s those three have ended: 2 in flight (x1.5); at 8 s: 3.
    """
    bucket = Bucket(60, 3)
    starts, _, durations, throttled = rate_limited_schedule(
        [1.0] * 6, 10, 5.0, [(bucket, 1.0)], slowdown=0.5
    )
    assert starts == pytest.approx([5.0, 5.0, 5.0, 6.0, 7.0, 8.0])
    assert durations == pytest.approx([2.0, 2.0, 2.0, 2.5, 1.5, 2.0])
    assert throttled == 3


@pytest.mark.parametrize("seed", range(40))
def test_the_load_under_a_limit_is_the_calls_in_flight(seed: int) -> None:
    """Random stages: each call's factor is 1 + beta (m - 1) for the m calls open at its start.

    m counts the calls that started at or before it and end after its start
    (itself, and others starting at the same instant, included); calls never
    share a slot, start in order, and a call waits only when throttled.
    """
    rng = np.random.default_rng(seed)
    n, slots, beta = int(rng.integers(1, 40)), int(rng.integers(1, 9)), float(rng.uniform(0, 1))
    draws = rng.choice([0.5, 1.0, rng.exponential(1.0)], size=n).tolist()  # ties and not
    bucket = Bucket(float(rng.uniform(30, 600)), float(rng.uniform(0.5, 5)))
    starts, slot_of, durations, throttled = rate_limited_schedule(
        draws, slots, 1.0, [(bucket, 1.0)], slowdown=beta
    )
    ends = [s + d for s, d in zip(starts, durations, strict=True)]
    assert starts == sorted(starts) and min(starts) >= 1.0
    for i in range(n):
        m = sum(starts[j] <= starts[i] < ends[j] for j in range(n))
        assert durations[i] == pytest.approx(draws[i] * (1 + beta * (m - 1)), rel=1e-12)
    for slot in set(slot_of):
        spans = sorted((starts[i], ends[i]) for i in range(n) if slot_of[i] == slot)
        assert all(
            a_end <= b_start + 1e-12 for (_, a_end), (b_start, _) in itertools.pairwise(spans)
        )
    assert 0 <= throttled <= n


def test_rate_bound_is_the_tightest_limit_less_its_burst() -> None:
    scenario = make_scenario(tokens=TOKENS, budget=3000)
    assert analytic(scenario, Shape(2, 2)).rate_bound == 0.0
    shape = Shape(2, 2)
    closed = analytic(scenario, shape)
    proposals = closed.iterations * shape.k
    per_rollout = TOKENS.rollout_input.mean() + TOKENS.rollout_output.mean()
    per_reflection = TOKENS.reflection_input(3) + TOKENS.reflection_output.mean()
    limits = RateLimits(
        task=RateLimit(rpm=200, tpm=100_000),
        reflection=RateLimit(rpm=20, tpm=10_000),
        burst_seconds=30,
    )
    expected = {
        "task rpm": (3000 - 100) / (200 / 60),
        "task tpm": (3000 * per_rollout - 50_000) / (100_000 / 60),
        "reflection rpm": (proposals - 10) / (20 / 60),
        "reflection tpm": (proposals * per_reflection - 5000) / (10_000 / 60),
    }
    limited = analytic(scenario.replace(rate_limits=limits), shape)
    assert limited.rate_bound == pytest.approx(max(expected.values()))
    assert limited.bound == closed.bound  # strong scaling is unchanged
    # A burst larger than the whole run's ask bounds nothing.
    generous = RateLimits(task=RateLimit(rpm=200), burst_seconds=3600)
    assert analytic(scenario.replace(rate_limits=generous), shape).rate_bound == 0.0


# -- traces ------------------------------------------------------------------------


def test_summarize_adds_up_the_calls_costs(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as writer:
        writer.write(replace(header(), source="runner", budget=3))
        common = {"iteration": 0, "phase": "seed_val", "candidate": "0"}
        for i, cost in enumerate([0.01, None, 0.02]):
            writer.write(
                Rollout(start=0.0, end=1.0, worker=i, example=f"val:{i}", cost=cost, **common)
            )
        writer.write(
            Reflection(
                start=1.0, end=2.0, iteration=1, slot=0, proposal="1-0", parent="0", cost=0.5
            )
        )
        writer.write(Stage(start=0.0, end=2.0, iteration=0, name="seed_val"))
        writer.write(RunEnd(start=2.0, end=2.0, status="completed", metric_calls=3, iterations=1))
    assert summarize(read_trace(path)).dollars == pytest.approx(0.53)

    unpriced = tmp_path / "unpriced.jsonl"
    lines = path.read_text().splitlines()
    unpriced.write_text(
        "\n".join(
            json.dumps({**data, "cost": None} if "cost" in data else data)
            for data in map(json.loads, lines)
        )
        + "\n"
    )
    assert summarize(read_trace(unpriced)).dollars is None


def test_a_simulated_trace_carries_tokens_and_costs(tmp_path: Path) -> None:
    scenario, shape = LIMITED["task tpm, reflection rpm, priced"]
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as writer:
        run = simulate_once(scenario, shape, 0, writer)
    trace = read_trace(path)
    calls = [*trace.of(Rollout), *trace.of(Reflection)]
    assert all(c.tokens_in is not None and c.tokens_out is not None for c in calls)
    assert all(c.cost is not None and c.cost > 0 for c in calls)
    assert {r.tokens_in for r in trace.of(Reflection)} == {round(TOKENS.reflection_input(3))}
    summary = summarize(trace)
    assert summary.dollars == pytest.approx(run.dollars, rel=1e-9)
    assert summary.wall_clock == pytest.approx(run.wall_clock, rel=1e-12)
    assert summary.metric_calls == run.metric_calls
    # A limited stage's rollouts still fit the pool and its barriers.
    for stage in trace.of(Stage):
        assert stage.start <= stage.end
    for rollout in trace.of(Rollout):
        assert rollout.start >= 0.0


# -- what pxn simulate and sweep print and write -----------------------------------


def render(table) -> str:
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(table)
    return console.export_text()


def test_output_shows_dollars_throttling_and_the_rate_bound_only_when_they_apply() -> None:
    scenario, shape = LIMITED["task tpm, reflection rpm, priced"]
    shapes = [shape]
    [limited] = sweep(scenario, shapes, 20)
    assert limited.dollars is not None and limited.dollars.low <= limited.dollars.mean
    assert limited.throttled_share.mean > 0 and limited.rate_limited
    text = render(predictions_table(scenario, [limited]))
    assert dollars_text(limited) in text
    assert dollars_text(limited).startswith(f"${limited.dollars.mean:.3f} [")  # under $1
    assert "throttled" in text and "rate bound" in text and "tpm" in text

    plain = make_scenario()
    [free] = sweep(plain, shapes, 20)
    assert free.dollars is None and free.throttled_share.mean == 0 and not free.rate_limited
    text = render(predictions_table(plain, [free]))
    assert "$" not in text and "throttled" not in text and "rate bound" not in text

    for prediction, applies in ((limited, True), (free, False)):
        [row] = csv.DictReader(
            io.StringIO(csv_text(predictions_report(scenario, [prediction]).rows))
        )
        for column in (
            "dollars_mean",
            "dollars_p5",
            "dollars_p95",
            "throttled_share_mean",
            "throttled_share_p5",
            "throttled_share_p95",
            "rate_bound_s",
        ):
            assert (row[column] != "") == applies, column
        [data] = json.loads(json_text(predictions_report(scenario, [prediction]).document))[
            "predictions"
        ]
        assert (data["dollars"] is None) == (not applies)
        assert (data["throttled_share"] is None) == (not applies)
    [row] = csv.DictReader(io.StringIO(csv_text(predictions_report(scenario, [limited]).rows)))
    assert float(row["dollars_mean"]) == pytest.approx(limited.dollars.mean)
    assert float(row["rate_bound_s"]) == pytest.approx(limited.analytic.rate_bound)


@pytest.mark.parametrize(
    ("mean", "low", "high", "text"),
    [
        (12.4, 11.9, 13.1, "$12.40 [11.90-13.10]"),
        (1234.5, 1100.0, 1300.0, "$1,234.50 [1,100.00-1,300.00]"),
        (0.4271, 0.39, 0.466, "$0.427 [0.390-0.466]"),
        (0.0043, 0.004, 0.0047, "$0.00430 [0.00400-0.00470]"),
    ],
)
def test_dollars_read_as_money(mean: float, low: float, high: float, text: str) -> None:
    scenario, shape = LIMITED["task tpm, reflection rpm, priced"]
    [prediction] = sweep(scenario, [shape], 2)
    assert dollars_text(replace(prediction, dollars=Interval(mean, low, high))) == text


def test_the_documented_scenario_example_loads_and_is_priced_and_limited(tmp_path: Path) -> None:
    reference = Path(__file__).resolve().parents[1] / "docs" / "scenario.md"
    blocks = re.findall(r"```toml\n(.*?)```", reference.read_text(encoding="utf-8"), re.S)
    [example] = [b for b in blocks if b.startswith('name = "my-task"')]
    # the page adds tokens, prices and rate limits to its example in a block of their own
    [costs] = [b for b in blocks if b.startswith("[tokens]")]
    example += costs
    path = tmp_path / "my-task.toml"
    path.write_text(example, encoding="utf-8")
    scenario = Scenario.load(path)  # the task model is priced from litellm's offline table
    assert scenario.prices is not None and scenario.prices.task_input > 0
    assert scenario.rate_limits.task.rpm == 500 and scenario.tokens is not None
    run = simulate_once(scenario, Shape(2, 2), 0)
    assert run.dollars is not None and run.dollars > 0
