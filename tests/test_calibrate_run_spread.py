"""How much whole runs differ in speed (load.*.run_spread): fitted, tested, recovered.

The fit is a nested analysis of variance of log latencies (runs within their
setup, each setup and phase its own mean). Its F test claims a spread at most
nominally where runs differ only by their calls' noise; its 95% interval holds
the truth about 95% of the time; a simulated truth is recovered end to end;
and one run per setup says it cannot tell.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from calibrate_helpers import TRUE, untimed_copy, write_traces
from conftest import run_pxn

from pxn.calibrate.traces import run_spread
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.calibrate.traces.run_spread import fit_run_spread
from pxn.calibrate.traces.units import Calls, cut_into_units
from pxn.load import Load, Loads
from pxn.shape import Shape
from pxn.trace_reading import load_traces


def synthetic_calls(
    rng: np.random.Generator,
    runs_per_setup: int,
    calls_per_run: int,
    spread: float,
    draw=lambda rng, n: rng.lognormal(0.0, 0.5, n),
    setups: int = 2,
) -> tuple[Calls, tuple[str, ...]]:
    """Rollouts of runs in setups, two phases of different means; each run's calls scaled
    by its own factor exp(spread z); setups differ by a factor of their own."""
    kinds, phases, latencies, runs, design = [], [], [], [], []
    for s in range(setups):
        for _ in range(runs_per_setup):
            run = len(design)
            design.append(f"setup {s}")
            phase = np.where(np.arange(calls_per_run) % 3 == 0, "full_val", "child_minibatch")
            base = draw(rng, calls_per_run) * np.where(phase == "full_val", 2.0, 1.0)
            latencies.append(base * (1 + s) * np.exp(spread * rng.standard_normal()))
            kinds += ["rollout"] * calls_per_run
            phases.append(phase)
            runs += [run] * calls_per_run
    n = len(kinds)
    calls = Calls(
        kind=np.array(kinds),
        phase=np.concatenate(phases),
        load=np.ones(n),
        latency=np.concatenate(latencies),
        minibatch=np.full(n, 3),
        censored=np.zeros(n, bool),
        event=np.empty(n, dtype=object),
        tokens_in=np.full(n, np.nan),
        tokens_out=np.full(n, np.nan),
        run=np.array(runs),
        wait=np.zeros(n),
    )
    return calls, tuple(design)


def at_most(claims: int, trials: int, nominal: float) -> bool:
    """A one-sided binomial test at 0.01 of the claims against the nominal rate."""
    return scipy.stats.binomtest(claims, trials, nominal, alternative="greater").pvalue > 0.01


FAMILIES = {
    "lognormal": lambda rng, n: rng.lognormal(0.0, 0.5, n),
    "gamma": lambda rng, n: rng.gamma(2.0, 1.0, n),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_spread_is_claimed_at_most_nominally_where_runs_differ_by_noise_alone(
    family: str,
) -> None:
    trials, draw = 400, FAMILIES[family]
    for runs, calls in ((2, 15), (3, 40), (4, 200)):
        rng = np.random.default_rng(runs * 1000 + calls)
        claims = 0
        for _ in range(trials):
            fit = fit_run_spread(*synthetic_calls(rng, runs, calls, 0.0, draw), "task")
            claims += fit.chosen > 0
        assert at_most(claims, trials, run_spread.ALPHA), f"{family} {runs}x{calls}: {claims}"


def test_the_interval_holds_the_spread_about_as_often_as_it_says() -> None:
    """200 calibrations of 5 runs per setup: the 95% interval holds the truth 88-99% of
    the time (a binomial range around 95%), and the estimate is near it on average."""
    rng = np.random.default_rng(3)
    truth, trials, inside, estimates = 0.12, 200, 0, []
    for _ in range(trials):
        fit = fit_run_spread(*synthetic_calls(rng, 5, 120, truth), "task")
        low, high = fit.interval
        inside += low <= truth <= high
        estimates.append(fit.spread)
    assert 0.88 * trials <= inside <= 0.99 * trials, inside
    assert np.mean(estimates) == pytest.approx(truth, rel=0.15)


def test_an_unsupported_spread_is_drawn_from_its_confidence_distribution() -> None:
    """Three runs with a small spread the test does not support: kept 0, its draws 0 in
    the share of the 95% interval's quantiles past the observed F ((p - 0.025) / 0.95),
    the rest up to the interval's upper end, as the F pivot's confidence distribution
    within its interval is."""
    rng = np.random.default_rng(5)
    fit = next(
        f
        for f in (fit_run_spread(*synthetic_calls(rng, 3, 60, 0.05), "task") for _ in range(50))
        if f.drawn_from_confidence and 0.2 < f.pvalue < 0.8
    )
    assert fit.chosen == 0 and "drawn from its interval" in fit.reason
    draws = np.array(fit.confidence_draws(np.random.default_rng(0), 20_000))
    assert np.mean(draws == 0) == pytest.approx((fit.pvalue - 0.025) / 0.95, abs=0.015)
    assert 0.95 * fit.interval[1] <= draws.max() <= fit.interval[1]


def test_runs_that_differ_plainly_are_supported_and_a_lone_run_per_setup_is_not_fitted() -> None:
    rng = np.random.default_rng(1)
    fit = fit_run_spread(*synthetic_calls(rng, 4, 100, 0.3), "task")
    assert fit.identified and fit.pvalue < 1e-6 and fit.chosen == fit.spread > 0
    assert fit.freedom == (6, 800 - 4 - 6)  # runs less setups; calls less every mean
    assert "supported (F=" in fit.reason
    lone = fit_run_spread(*synthetic_calls(rng, 1, 100, 0.3, setups=3), "task")
    assert not lone.identified and lone.chosen == 0
    assert "no setup was run twice" in lone.reason
    none = fit_run_spread(*synthetic_calls(rng, 3, 100, 0.3), "reflection")  # no reflections
    assert not none.identified and none.chosen == 0


def test_a_resample_numbers_each_drawn_copy_of_a_run_as_a_run_of_its_own(tmp_path: Path) -> None:
    runs = write_traces(tmp_path, TRUE.replace(budget=300), Shape(1, 1), range(3))
    units = cut_into_units(load_traces(runs).traces)
    assert set(units.calls.run.tolist()) == {0, 1, 2}
    drawn = units.resample(np.random.default_rng(0))
    assert drawn.runs == 3 and len(drawn.design) == 3
    assert np.array_equal(drawn.calls.run, drawn.run[drawn.call_unit])
    assert np.all(np.diff(drawn.run) >= 0)  # copies numbered in the order drawn


def test_a_simulated_spread_is_recovered_end_to_end(tmp_path: Path) -> None:
    """Runs of one setup simulated with the task model's spread 0.15 and none on the
    reflections: calibrate keeps the task's within its interval, not the reflections'."""
    truth = TRUE.replace(budget=600, loads=Loads(Load(run_spread=0.15), Load()))
    runs = write_traces(tmp_path, truth, Shape(1, 1), range(8))
    cal = calibrate_traces(runs, draws=20)
    task, reflection = cal.run_spreads["task"], cal.run_spreads["reflection"]
    assert task.chosen > 0 and task.interval[0] <= 0.15 <= task.interval[1], task
    assert cal.scenario.loads.task.run_spread == task.chosen
    assert reflection.chosen == 0 and reflection.interval[0] == 0, reflection
    drawn = [d["load.task.run_spread"] for d in cal.scenario.uncertainty.draws]
    assert len(drawn) == 20 and 0 < np.median(drawn) < 0.3
    # Measured but not supported: kept 0, drawn from its interval.
    assert reflection.drawn_from_confidence
    drawn = [d["load.reflection.run_spread"] for d in cal.scenario.uncertainty.draws]
    assert len(drawn) == 20 and min(drawn) >= 0 and np.median(drawn) <= reflection.interval[1]


def test_the_report_and_the_file_say_what_was_found(tmp_path: Path) -> None:
    truth = TRUE.replace(budget=300, loads=Loads(Load(run_spread=0.3), Load()))
    runs = write_traces(tmp_path, truth, Shape(1, 1), range(4))
    out = tmp_path / "spread.toml"
    result = run_pxn("calibrate", *runs, "-o", out, "--draws", "0")
    assert result.returncode == 0, result.stderr
    [task_line, reflection_line] = [
        line for line in result.stdout.splitlines() if line.startswith("  run spread:")
    ]
    assert "-> load.task.run_spread=" in task_line and "supported (F=" in task_line
    assert "-> load.reflection.run_spread=0" in reflection_line
    assert f"# {task_line}" in out.read_text()
    lone = run_pxn("calibrate", runs[0], "-o", tmp_path / "lone.toml", "--draws", "0")
    assert "run spread: not identifiable: no setup was run twice; kept 0, each model" in lone.stdout


def test_a_scenario_without_draws_of_the_spread_keeps_it_fixed(tmp_path: Path) -> None:
    """The spread is a parameter like any other: a draw that sets it overrides the point."""
    scenario = TRUE.replace(loads=Loads(Load(run_spread=0.2), Load()))
    drawn = scenario.with_parameters({"load.task.run_spread": 0.05})
    assert drawn.loads.task.run_spread == 0.05
    assert replace(drawn.loads.task, run_spread=0.2) == scenario.loads.task


def test_one_run_per_setup_draws_each_spread_from_the_prior(tmp_path: Path) -> None:
    """No setup run twice: the spread cannot be measured, so it is kept 0 in the scenario and
    its draws spread over the prior's [0, 0.4] times sqrt(2): the next run's conditions may
    differ, and so may the one run's own, which no bootstrap of it can show."""
    runs = write_traces(tmp_path, TRUE.replace(budget=300), Shape(1, 1), range(1))
    cal = calibrate_traces(runs, draws=40, search="rates")
    for role in ("task", "reflection"):
        assert cal.run_spreads[role].drawn_from_prior
        assert cal.scenario.loads.of(role).run_spread == 0
        spreads = [d[f"load.{role}.run_spread"] for d in cal.scenario.uncertainty.draws]
        assert min(spreads) >= 0 and max(spreads) <= run_spread.RUN_SPREAD_PRIOR * 2**0.5
        assert max(spreads) > run_spread.RUN_SPREAD_PRIOR
        assert max(spreads) - min(spreads) > 0.2


def test_repeated_runs_whose_rollouts_are_untimed_draw_no_prior(tmp_path: Path) -> None:
    """Two runs of one setup whose adapter timed no rollout: the rollouts' spread cannot be
    measured, but the setup was repeated, so no prior stands in; the reflections' is fitted."""
    runs = write_traces(tmp_path, TRUE.replace(budget=300), Shape(1, 1), range(2))
    untimed = [
        untimed_copy(r / "trace.jsonl", tmp_path / f"untimed-{i}") for i, r in enumerate(runs)
    ]
    cal = calibrate_traces(untimed, draws=20, search="rates")
    task = cal.run_spreads["task"]
    assert not task.drawn_from_prior and "not measurable" in task.reason
    assert all("load.task.run_spread" not in d for d in cal.scenario.uncertainty.draws)
    assert cal.run_spreads["reflection"].identified
