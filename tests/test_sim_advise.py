"""`pxn advise`: the search finds the allocation an independent count says is best.

With constant latencies and no acceptance every replicate of an allocation is
the same run, so its wall-clock and dollars can be counted by hand: stage by
stage, rounds of W rollouts and of C reflections. The tests check the
advice against that count, not against the simulator's own numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import run_pxn
from sim_helpers import fixed, make_scenario

from pxn.acceptance import Acceptance
from pxn.api.advice_plot import pareto_front
from pxn.api.plots import error_bar
from pxn.durations import parse_duration
from pxn.errors import PxnError
from pxn.prices import Prices
from pxn.rate_limits import RateLimit, RateLimits
from pxn.scenario import Scenario, Uncertainty
from pxn.sim import advise as advise_module
from pxn.sim.advise import Allocation, Ask, parse_values
from pxn.sim.advise_ranking import NOISE
from pxn.sim.advise_search import advise
from pxn.sim.predict import Interval
from pxn.tokens import Tokens

T_E, T_R, V = 2.0, 10.0, 20  # rollout and reflection seconds, valset size


def constant_scenario(**changes) -> Scenario:
    base = {
        "rollout": fixed(T_E),
        "reflection": fixed(T_R),
        "acceptance": Acceptance(0.0),
        "stage_overhead": 0.0,
        "valset_size": V,
        "reflection_concurrency": 4,
    }
    return make_scenario(**(base | changes))


def counted(
    allocation: Allocation, budget: int, c: int = 4, t_e: float = T_E
) -> tuple[float, int, int]:
    """(wall-clock, metric calls, proposals) of a run in which no child is ever accepted."""
    k, b, w = allocation.p * allocation.n, allocation.b, allocation.workers
    iterations = math.ceil((budget - V) / (2 * k * b))
    step = 2 * math.ceil(k * b / w) * t_e + math.ceil(k / c) * T_R
    wall = math.ceil(V / w) * t_e + iterations * step
    return wall, V + iterations * 2 * k * b, iterations * k


def ask(**changes) -> Ask:
    base = {"budget": 400, "p": (1, 2), "n": (1, 2, 4), "b": (1, 3), "workers": (4, 16)}
    return Ask(**(base | changes), replicates=4)


def test_ranges_and_durations_parse_as_a_user_writes_them() -> None:
    assert parse_values("1..4,8", "p") == (1, 2, 3, 4, 8)
    assert parse_values("64, 128,512", "workers") == (64, 128, 512)
    seconds = {
        text: parse_duration(text, "--deadline") for text in ("3h", "1h30m", "45min", "600s")
    }
    assert seconds == {"3h": 10800, "1h30m": 5400, "45min": 2700, "600s": 600}
    for bad in ("0..3", "4..2", "a", "1-4"):
        with pytest.raises(PxnError, match=r"^p "):
            parse_values(bad, "p")
    with pytest.raises(PxnError, match="--deadline is a duration"):
        parse_duration("soon", "--deadline")


def test_pareto_front_keeps_only_the_undominated() -> None:
    points = [(1.0, 9.0), (2.0, 5.0), (3.0, 6.0), (4.0, 1.0), (2.5, 5.0)]
    assert pareto_front(points) == [(1.0, 9.0), (2.0, 5.0), (4.0, 1.0)]


def test_error_bars_are_never_negative() -> None:
    # A count that is 10 in 95% of runs and 0 in the rest: its mean is below its 5th percentile.
    assert error_bar(Interval(9.5, 10.0, 10.0)) == [[0.0], [0.5]]
    assert error_bar(Interval(120.0, 60.0, 240.0), size=60.0) == [[1.0], [2.0]]


def test_fastest_allocation_is_the_one_counted_fastest() -> None:
    the_ask = ask()
    advice = advise(constant_scenario(), the_ask)
    walls = {a: counted(a, the_ask.budget)[0] for a in the_ask.allocations()}
    fastest = min(walls.values())
    assert advice.recommended is not None
    assert advice.recommended.allocation in {a for a, t in walls.items() if t == fastest}
    assert advice.recommended.prediction.wall_clock.mean == pytest.approx(fastest)
    # Zero variance: the ties are exactly the other allocations counted as fast.
    tied = {x.allocation for x in advice.runners_up}
    assert tied == {a for a, t in walls.items() if t == fastest} - {advice.recommended.allocation}
    assert len(advice.assessments) == len(the_ask.allocations())


def test_cheapest_allocation_under_a_deadline_is_the_one_counted_cheapest() -> None:
    tokens = Tokens(fixed(100), fixed(20), fixed(300), 500.0, 120.0, measured_minibatch=3)
    prices = Prices(1.0, 4.0, 2.0, 8.0)  # dollars per million tokens
    scenario = constant_scenario(tokens=tokens, prices=prices)
    the_ask = ask(objective="cost", deadline=400.0)

    def dollars(a: Allocation) -> float:
        _, calls, proposals = counted(a, the_ask.budget)
        reflection = (500 + 120 * a.b) * 2.0 + 300 * 8.0
        return (calls * (100 * 1.0 + 20 * 4.0) + proposals * reflection) / 1e6

    on_time = [a for a in the_ask.allocations() if counted(a, the_ask.budget)[0] <= 400]
    cheapest = min(dollars(a) for a in on_time)
    advice = advise(scenario, the_ask)
    assert advice.recommended is not None
    best = advice.recommended
    assert best.allocation in on_time
    assert best.prediction.dollars.mean == pytest.approx(cheapest)
    late = [x for x in advice.assessments if x.allocation not in on_time]
    assert late and all(not x.feasible and x.meets_deadline is False for x in late)
    for x in advice.assessments:  # flagged when its 95th percentile is past 90% of 400 s
        high = x.prediction.wall_clock.high
        assert ("near the deadline" in x.limited_by) == (360 < high <= 400)
        assert ("past the deadline" in x.limited_by) == (high > 400)


def test_a_deadline_below_the_strong_scaling_bound_is_refused_unsimulated() -> None:
    scenario = constant_scenario(rollout=fixed(48.0), trainset_size=50)
    # B T_e / W = 2000 * 48 s / 64 = 25 min: no allocation can meet 10 minutes.
    the_ask = ask(budget=2000, workers=(16, 64), deadline=600.0)
    advice = advise(scenario, the_ask)
    assert advice.recommended is None and advice.assessments == []
    [reason] = advice.reasons
    assert "10.0 min deadline" in reason and "W=64" in reason
    assert "strong-scaling bound" in reason and "25.0 min" in reason


def test_a_deadline_below_the_rate_limits_bound_is_refused_unsimulated() -> None:
    # 400 metric calls at 10 a minute, less the one-minute burst of 10: at least 39 minutes,
    # whatever W; the strong-scaling bound is under a minute.
    limits = RateLimits(task=RateLimit(rpm=10))
    advice = advise(constant_scenario(rate_limits=limits), ask(deadline=1800.0))
    assert advice.assessments == []
    [reason] = advice.reasons
    assert "the provider rate limit's bound" in reason and "30.0 min deadline" in reason


def test_a_deadline_above_the_bound_but_out_of_reach_names_the_fastest() -> None:
    the_ask = ask(deadline=100.0)  # the bound is 400 * 2 s / 16 = 50 s; no run is that fast
    advice = advise(constant_scenario(), the_ask)
    fastest = min(counted(a, the_ask.budget)[0] for a in the_ask.allocations())
    assert advice.recommended is None
    [reason] = advice.reasons
    assert reason.startswith("no allocation meets the 1.7 min deadline")
    assert f"{fastest / 60:.1f} min" in reason


def test_a_dollar_cap_below_the_metric_calls_cost_is_refused() -> None:
    tokens = Tokens(fixed(1000), fixed(1000), fixed(300), 500.0, 120.0, measured_minibatch=3)
    scenario = constant_scenario(tokens=tokens, prices=Prices(1.0, 1.0, 1.0, 1.0))
    advice = advise(scenario, ask(max_dollars=0.5))  # 400 calls x 2000 tokens x $1/M = $0.80
    assert advice.assessments == []
    assert advice.reasons == [
        "no allocation fits $0.50: the B=400 metric calls alone cost $0.80 at the "
        "scenario's mean tokens and prices"
    ]


def test_a_wide_pool_against_a_rate_limit_is_limited_by_it() -> None:
    tokens = Tokens(fixed(100), fixed(20), fixed(300), 500.0, 120.0, measured_minibatch=3)
    limits = RateLimits(task=RateLimit(rpm=500), burst_seconds=1)
    scenario = constant_scenario(tokens=tokens, rate_limits=limits, trainset_size=200)
    advice = advise(scenario, ask(budget=3000, workers=(512,), p=(4,), n=(8,), b=(3,)))
    [x] = advice.assessments
    assert x.limited_by.startswith("rate limit")
    # 3000 metric calls at 500 a minute cannot take less than 6 minutes.
    assert x.prediction.wall_clock.mean >= 3000 / 500 * 60


@pytest.mark.parametrize(
    ("reflection", "pace"), [(10.0, "reflections"), (1.0, "iteration latency")]
)
def test_a_run_mostly_reflecting_is_limited_by_its_reflections(
    reflection: float, pace: str
) -> None:
    # 1x1 b=1 on 16 slots: each step is a 2 s rollout, the reflection, a 2 s
    # rollout; a 10 s reflection is 10/14 of it, a 1 s one 1/5.
    scenario = constant_scenario(reflection=fixed(reflection))
    advice = advise(scenario, ask(p=(1,), n=(1,), b=(1,), workers=(16,)))
    [x] = advice.assessments
    share = x.prediction.stage_time["reflection"] / x.prediction.wall_clock.mean
    assert share == pytest.approx(reflection / (reflection + 2 * T_E), abs=0.02)
    assert x.limited_by == pace


def test_racing_gives_the_full_grids_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = make_scenario(acceptance=Acceptance(0.3))  # random latencies: a real race
    the_ask = Ask(400, (1, 2, 4), (1, 2), (1, 3), (4, 16), replicates=30)
    full = advise(scenario, the_ask)
    monkeypatch.setattr(advise_module, "FULL_GRID_MAX", 4)
    monkeypatch.setattr(advise_module, "RACE_REPLICATES", 10)
    raced = advise(scenario, the_ask)
    assert raced.search.startswith("raced 24 allocations: 10 replicates each")
    assert raced.recommended.allocation == full.recommended.allocation
    # Every figure but the speedup, which advise leaves NaN (no single is simulated).
    assert replace(raced.recommended.prediction, speedup=0) == replace(
        full.recommended.prediction, speedup=0
    )
    dropped = [x for x in raced.assessments if x.prediction.replicates == 10]
    assert dropped, "the race dropped nothing: it did not race"


def with_draws(scenario: Scenario, path: str, values: list[float]) -> Scenario:
    return scenario.replace(uncertainty=Uncertainty("test", tuple({path: v} for v in values)))


def test_feasibility_holds_across_the_parameter_draws() -> None:
    """A deadline the point estimate meets, missed in one draw of five: not feasible.

    Constant latencies make each draw's wall-clock a count; with 2 replicates a
    draw, the slow draw is 2 of 10 replicates, past the 95th percentile's rank.
    """
    allocation = Allocation(2, 2, 3, 16)
    one = ask(p=(2,), n=(2,), b=(3,), workers=(16,))
    fast, slow = counted(allocation, one.budget)[0], counted(allocation, one.budget, t_e=3 * T_E)[0]
    deadline = (fast + slow) / 2
    scenario = constant_scenario()
    uncertain = with_draws(scenario, "rollout.scale", [1.0, 1.0, 1.0, 1.0, 3.0])
    the_ask = replace(one, deadline=deadline, replicates=10)
    [point] = advise(scenario, the_ask).assessments
    [drawn] = advise(uncertain, the_ask).assessments
    assert point.meets_deadline and point.prediction.wall_clock.high == pytest.approx(fast)
    assert drawn.meets_deadline is False and not drawn.feasible
    assert drawn.prediction.wall_clock.low == pytest.approx(fast)
    assert drawn.prediction.wall_clock.high == pytest.approx(slow)
    assert "past the deadline" in drawn.limited_by


def test_ties_are_judged_on_paired_differences() -> None:
    """W=11 against W=12 at 2x2 b=3: one minibatch rollout of 12 waits for a second round.

    Replicate r of both runs the same draw and seed stream, so their
    difference is nearly constant while each wall-clock swings widely with
    the draws: paired, W=12 is clearly faster; compared as two independent
    means (the standard errors added in quadrature) they would tie.
    """
    scenario = make_scenario()
    factors = np.geomspace(0.5, 2.0, 10)
    scale = scenario.reflection.params["scale"]
    uncertain = with_draws(scenario, "reflection.scale", list(scale * factors))
    advice = advise(uncertain, Ask(400, (2,), (2,), (3,), (11, 12), replicates=60))
    best = advice.recommended
    assert best is not None and best.allocation.workers == 12
    [other] = [x for x in advice.assessments if x is not best]
    difference, paired_se = other.versus(best, "time")
    unpaired_se = math.hypot(best.wall_clock_se, other.wall_clock_se)
    assert paired_se < unpaired_se / 10  # measured: 0.15 s against 10.9 s
    assert difference > NOISE * paired_se and advice.runners_up == []
    assert abs(difference) <= NOISE * unpaired_se  # what the unpaired rule would have tied
    # Its own figures: the paired difference is the difference of the means.
    assert difference == pytest.approx(
        other.prediction.wall_clock.mean - best.prediction.wall_clock.mean
    )


def test_racing_with_draws_gives_the_full_grids_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = make_scenario()
    factors = np.geomspace(0.5, 2.0, 5)
    uncertain = with_draws(
        scenario, "rollout.scale", list(scenario.rollout.params["scale"] * factors)
    )
    the_ask = Ask(400, (1, 2, 4), (1, 2), (1, 3), (4, 16), replicates=30)
    full = advise(uncertain, the_ask)
    monkeypatch.setattr(advise_module, "FULL_GRID_MAX", 4)
    monkeypatch.setattr(advise_module, "RACE_REPLICATES", 10)
    raced = advise(uncertain, the_ask)
    assert raced.recommended.allocation == full.recommended.allocation
    assert raced.recommended.prediction == full.recommended.prediction
    kept = [x for x in raced.assessments if x.prediction.replicates == 30]
    assert raced.recommended in kept and len(kept) < len(the_ask.allocations())  # it raced


def test_cost_questions_need_prices() -> None:
    with pytest.raises(PxnError, match="no \\[prices\\]"):
        advise(constant_scenario(), ask(objective="cost"))


def test_cli_prints_the_recommendation_and_writes_csv_json_and_figure(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    constant_scenario().save(path)
    out = tmp_path / "advice"
    args = [str(path), "--budget", "400", "--p", "1..2", "--n", "1,2", "--workers", "4,16"]
    done = run_pxn("advise", *args, "--reps", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "recommended" in done.stdout and "fixed budget of metric calls" in done.stdout
    document = json.loads((out / "advise.json").read_text())
    assert document["recommended"] in done.stdout
    assert len(document["allocations"]) == 8
    assert (out / "advise.csv").read_text().count("\n") == 9
    assert (out / "pareto.png").stat().st_size > 10_000


def test_cli_infeasible_ask_exits_1_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    constant_scenario().save(path)
    done = run_pxn("advise", str(path), "--budget", "400", "--deadline", "10s", "--reps", "3")
    assert done.returncode == 1
    assert "pxn: no allocation meets the 10.0 s deadline" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--objective", "speed"], "--objective is time, cost or score"),
        (["--objective", "cost"], "no [prices]"),
        (["--p", "0..2"], "--p '0..2' is not a range"),
        (["--minibatch", "99"], "--minibatch 99 is larger than the trainset"),
        (["--deadline", "soon"], "--deadline is a duration"),
    ],
)
def test_cli_bad_asks_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], fragment: str
) -> None:
    path = tmp_path / "s.toml"
    constant_scenario().save(path)
    done = run_pxn("advise", str(path), "--budget", "400", *args)
    assert done.returncode == 2, done.stderr
    assert fragment in done.stderr and done.stderr.count("\n") == 1
