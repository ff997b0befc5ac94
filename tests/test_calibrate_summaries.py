"""`pxn calibrate --summaries`: the file formats, refusals, the ABC-SMC sampler, and recovery.

Statistical tests are seeded, so each is deterministic; their significance is
stated where they assert an interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from conftest import assert_user_error, run_pxn

from pxn.api.calibration_report import reported
from pxn.calibrate.summaries.abc_smc import (
    AbcSmcResult,
    Cutoff,
    Population,
    Scale,
    Settings,
    _generation,
    abc_smc,
)
from pxn.calibrate.summaries.facts import Fact, Setup
from pxn.calibrate.summaries.infer import (
    FactCheck,
    _refuse_unpredicted,
    _refuse_unreproduced,
    base_scenario,
    from_scale,
    on_scale,
    priors_for,
    run_model,
    simulate_points,
)
from pxn.calibrate.summaries.priors import Prior, Priors
from pxn.calibrate.summaries.reading import read_summaries
from pxn.errors import PxnError
from pxn.run_summary import RunSummary
from pxn.scenario import CalibratedOn, Scenario
from pxn.shape import Shape
from pxn.sim.backends import LocalBackend
from pxn.sim.model import simulate_once

SETUP = """[setup]
budget = 400
valset_size = 20
trainset_size = 60
workers = 64
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- reading -------------------------------------------------------------------


def test_toml_facts_units_ranges_and_sweep_runs(tmp_path: Path) -> None:
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
wall_clock_hours = 1.5
iterations = [20, 24]

[[runs]]
shape = "2x2"
workers = 32
full_val_share = 0.5

[sweep]
shapes = ["single", "2x2", "4x4"]
fastest_speedup = [3, 4]
""")  # fmt: skip
    summaries = read_summaries(path)
    by_label = {f.label: f for f in summaries.facts}
    clock = by_label["single wall clock"]
    assert (clock.low, clock.high, clock.runs) == (5400.0, 5400.0, (0,))
    assert by_label["single iterations"].ranged
    # The sweep's single is the listed single run; its 2x2 is not the listed one (W=32
    # differs from [setup]), so a 2x2 and a 4x4 on the setup are added.
    assert [(r.shape, r.setup.workers) for r in summaries.runs] == [
        (Shape(1, 1), 64), (Shape(2, 2), 32), (Shape(2, 2), 64), (Shape(4, 4), 64),
    ]  # fmt: skip
    assert by_label["sweep: fastest batched run's speedup"].runs == (0, 2, 3)
    # Reported precision, half a unit in the last digit written: 1.5 h is 1.45-1.55 h.
    assert clock.precision == pytest.approx(180.0)
    assert by_label["single iterations"].precision == 0.5
    # Four runs; none reports its metric calls (the budget, 400, stands for them); the
    # most proposals, single's 24 iterations at its top.
    assert summaries.calibrated_on() == CalibratedOn(runs=4, metric_calls=400, proposals=24)


def test_calibrated_on_takes_the_most_of_what_the_runs_report(tmp_path: Path) -> None:
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
iterations = 30
metric_calls = 412

[[runs]]
shape = "4x1"
iterations = [9, 10]
""")  # fmt: skip
    assert read_summaries(path).calibrated_on() == CalibratedOn(2, 412, 40)
    wall_only = write(
        tmp_path, "w.toml", SETUP + '[[runs]]\nshape = "single"\nwall_clock_hours = 2\n'
    )
    assert read_summaries(wall_only).calibrated_on() is None


def test_csv_with_a_range_cell(tmp_path: Path) -> None:
    path = write(tmp_path, "s.csv", (
        "shape,budget,valset_size,workers,wall_clock_minutes,dollars,task_model\n"
        "single,400,20,64,30,12..16,gpt-4.1-mini\n"
        "4x4,400,20,64,9,,gpt-4.1-mini\n"
    ))  # fmt: skip
    summaries = read_summaries(path)
    assert [(f.label, f.low, f.high) for f in summaries.facts] == [
        ("single wall clock", 1800.0, 1800.0),
        ("single dollars", 12.0, 16.0),
        ("4x4 wall clock", 540.0, 540.0),
    ]
    assert summaries.has_dollars and summaries.setup.trainset_size == 20  # defaults to V


def test_a_gain_may_be_negative_where_a_score_may_not(tmp_path: Path) -> None:
    """A new candidate can score below its parent on validation: traces give such gains."""
    path = write(tmp_path, "s.toml", SETUP + '[[runs]]\nshape = "single"\nval_gain = -0.05\n')
    (fact,) = read_summaries(path).facts
    assert (fact.quantity, fact.low, fact.high) == ("val_gain", -0.05, -0.05)


def test_sweep_speedups_read_the_right_runs() -> None:
    """most_speedup: the value more than half the batched runs reach; fastest: the top."""
    from pxn.calibrate.summaries.facts import Fact

    def run(wall: float) -> RunSummary:
        return RunSummary(wall, 10, 2, 10, 2, 400, {}, 0.5)

    walls = [100.0, 90.0, 60.0, 50.0, 40.0, 30.0]  # single, then five batched
    summaries = [run(w) for w in walls]
    indices = tuple(range(6))
    most = Fact("m", "most_speedup", 2.0, math.inf, indices, "")
    fastest = Fact("f", "fastest_speedup", 3.0, 4.0, indices, "")
    # Speedups 1.11, 1.67, 2, 2.5, 3.33: three of five (more than half) reach 2.
    assert most.measure(summaries) == pytest.approx(2.0)
    assert fastest.measure(summaries) == pytest.approx(100 / 30)


# -- refusals: one line, exit 2, nothing written --------------------------------


@pytest.mark.parametrize(
    ("name", "text", "fragments"),
    [
        ("missing.csv", "shape,budget,valset_size,wall_clock\nsingle,400,20,60\n",
         ["is missing column(s) workers"]),
        ("calls.csv", "shape,budget,valset_size,workers,iterations,metric_calls\n"
                      "single,400,20,64,500,410\n",
         ["line 2", "more iterations than metric calls"]),
        ("share.toml", SETUP + '[[runs]]\nshape = "single"\nfull_val_share = 1.7\n',
         ["full_val_share 1.7 is above 1"]),
        ("budget.toml", SETUP + '[[runs]]\nshape = "single"\nmetric_calls = 300\n',
         ["fewer metric calls than its budget 400"]),
        ("typo.toml", SETUP + '[[runs]]\nshape = "single"\niteration = 30\n',
         ["unknown field 'iteration'", "did you mean 'iterations'"]),
        ("unpriced.toml", SETUP + '[[runs]]\nshape = "single"\ndollars = 3\n',
         ["no task_model"]),
        ("prior.toml", SETUP + '[[runs]]\nshape = "single"\niterations = 30\n'
                       '[priors]\n"rollout.shape" = { uniform = [0, 1] }\n',
         ["prior of 'rollout.shape'"]),
        ("speedup.toml", SETUP + '[sweep]\nshapes = ["2x2", "4x4"]\nfastest_speedup = 3\n',
         ["needs single and at least two batched shapes"]),
        ("negative.toml", SETUP + '[[runs]]\nshape = "single"\nseed_score = -0.1\n',
         ["seed_score must be >= 0: got -0.1"]),
    ],
)  # fmt: skip
def test_impossible_or_malformed_summaries_are_one_line(
    tmp_path: Path, name: str, text: str, fragments: list[str]
) -> None:
    out = tmp_path / "out.toml"
    ran = run_pxn("calibrate", "--summaries", write(tmp_path, name, text), "-o", out)
    assert_user_error(ran, *fragments)
    assert not out.exists()


def test_traces_and_summaries_together_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "s.toml", SETUP + '[[runs]]\nshape = "single"\niterations = 30\n')
    ran = run_pxn("calibrate", "trace.jsonl", "--summaries", path, "-o", tmp_path / "o.toml")
    assert_user_error(ran, "trace files or --summaries, not both")


@pytest.mark.parametrize(
    "flag", [["--draws", "10"], ["--task-model", "gpt-4.1-mini"], ["--latency", "gamma"]]
)
def test_flags_only_traces_read_are_refused_with_summaries(tmp_path: Path, flag: list[str]) -> None:
    path = write(tmp_path, "s.toml", SETUP + '[[runs]]\nshape = "single"\niterations = 30\n')
    out = tmp_path / "o.toml"
    ran = run_pxn("calibrate", "--summaries", path, "-o", out, *flag)
    assert_user_error(ran, f"{flag[0]} applies to traces", "[inference]")
    assert not out.exists()


@pytest.mark.parametrize(("reported", "refused"), [(1.3, False), (1.6, True)])
def test_a_fact_within_one_unit_of_the_population_is_a_miss_not_a_refusal(
    reported: float, refused: bool
) -> None:
    """The kept runs reach 1.0 at most and one run's sd of the figure is 0.5: a reported
    1.3 (a run in a tail) is left to the predictive check; 1.6 is refused."""
    figures = np.linspace(0.0, 1.0, 11)[:, None]
    population = Population(np.zeros((11, 1)), figures, np.zeros(11))
    scale = Scale(np.array([0.5]), np.array([0.5]), 1.0, 1.4, 0)
    outcome = AbcSmcResult(population, scale, (), True, "converged")
    fact = Fact("run gain", "val_gain", reported, reported, (0,), str(reported))
    point = np.array([reported])
    if refused:
        with pytest.raises(PxnError, match="no parameter setting within the priors"):
            _refuse_unreproduced(outcome, (fact,), point, point)
    else:
        _refuse_unreproduced(outcome, (fact,), point, point)


def test_facts_no_setting_reproduces_are_refused_after_inference(tmp_path: Path) -> None:
    """B = 400, V = 20 affords at most (400 - 20) / 6 = 63 single iterations, never 200."""
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
wall_clock_minutes = 30
iterations = 200
[inference]
particles = 60
max_generations = 6
""")  # fmt: skip
    out = tmp_path / "out.toml"
    ran = run_pxn("calibrate", "--summaries", path, "-o", out, "--jobs", "1")
    assert_user_error(ran, "no parameter setting within the priors reproduces",
                      "single iterations 200")  # fmt: skip
    assert not out.exists()


def test_an_inference_that_does_not_converge_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
wall_clock_minutes = 30
iterations = 40
[inference]
particles = 40
max_generations = 2
min_acceptance = 0.01
""")  # fmt: skip
    out = tmp_path / "out.toml"
    ran = run_pxn("calibrate", "--summaries", path, "-o", out, "--jobs", "1")
    assert_user_error(ran, "did not converge", "more [inference] particles")
    assert not out.exists()


# -- the sampler -----------------------------------------------------------------


@dataclass(frozen=True)
class NoisyShift:
    """y = x + N(0, 1): one fact, a run of it drawn from the run's seed."""

    def figures(self, point: np.ndarray, seed: int, cutoff: Cutoff | None) -> np.ndarray:
        return np.array([point[0] + np.random.default_rng(seed).normal()])


def in_turn(fn, units: list[tuple]) -> list:
    return [fn(*unit) for unit in units]


def test_abc_smc_samples_the_abc_posterior_at_the_noise_level() -> None:
    """y = x + N(0, 1) observed at y = 1 under a flat prior on [-5, 5].

    The pilot must find the run-to-run sd (1) and a noise level of about the
    90% point of |N(0, 1)| (1.64); the population must then be the ABC
    posterior at the tolerance eps it ended at, whose density is
    P(|x + z - 1| <= eps) = Phi(1 - x + eps) - Phi(1 - x - eps), computed here
    exactly on a grid. Bounds: the pilot's sd from 10 settings x 10 runs is
    within 15% (its sd is ~8%), the noise level within 25%; the population's
    median within 0.25 of 1 and its IQR within 15% of the exact one (400
    correlated particles: Monte Carlo sd ~0.1 and ~8%).
    """
    priors = Priors(("x",), (Prior("uniform", -5.0, 5.0),), {})
    fact, precision = np.array([1.0]), np.array([0.0])
    outcome = abc_smc(priors, NoisyShift(), in_turn, fact, fact, precision, Settings(), seed=3)
    assert outcome.converged, outcome.verdict
    assert outcome.scale.noise[0] == pytest.approx(1.0, rel=0.15)
    assert outcome.scale.noise_level == pytest.approx(scipy.stats.norm.ppf(0.95), rel=0.25)
    eps = outcome.history[-1].tolerance
    assert eps == outcome.scale.noise_level
    grid = np.linspace(-5, 5, 20001)
    density = scipy.stats.norm.cdf(1 - grid + eps) - scipy.stats.norm.cdf(1 - grid - eps)
    cdf = np.cumsum(density) / density.sum()
    exact_q25, exact_q75 = np.interp([0.25, 0.75], cdf, grid)
    q25, median, q75 = outcome.population.quantiles(0, [0.25, 0.5, 0.75])
    assert abs(median - 1.0) < 0.25
    assert q75 - q25 == pytest.approx(exact_q75 - exact_q25, rel=0.15)
    assert np.all(outcome.population.distances <= eps)
    again = abc_smc(priors, NoisyShift(), in_turn, fact, fact, precision, Settings(), seed=3)
    assert np.array_equal(again.population.points, outcome.population.points)


@dataclass(frozen=True)
class NoisyShifts:
    """Four facts, each y = x + N(0, 1)."""

    def figures(self, point: np.ndarray, seed: int, cutoff: Cutoff | None) -> np.ndarray:
        return point[0] + np.random.default_rng(seed).normal(size=4)


def test_a_generation_abandoned_within_the_rerun_level_ends_a_converged_run() -> None:
    """Facts of one run sit about sqrt(2) times the noise level from a true setting's runs
    (the rerun level): a population that ran within it holds what the facts can say,
    though the next, tighter generation was accepted too rarely to run. Abandoned before
    one ran there, the sampler has not converged. Four facts of sd 1: the noise level
    is about the 90% point of chi with 4 degrees (2.79), the rerun level sqrt(2) times it.
    (The seeds are chosen for each outcome; min_acceptance 40% forces the abandonment.)"""
    priors = Priors(("x",), (Prior("uniform", -5.0, 5.0),), {})
    fact, precision = np.ones(4), np.zeros(4)
    strict = Settings(particles=100, min_acceptance=0.4)
    outcome = abc_smc(priors, NoisyShifts(), in_turn, fact, fact, precision, strict, seed=1)
    chi = math.sqrt(scipy.stats.chi2.ppf(0.9, 4))
    assert outcome.scale.noise_level == pytest.approx(chi, rel=0.25)
    assert outcome.scale.rerun_level == pytest.approx(math.sqrt(2) * chi, rel=0.25)
    last = outcome.history[-1].tolerance
    assert outcome.converged and "within the rerun level" in outcome.verdict, outcome.verdict
    assert outcome.scale.noise_level < last <= outcome.scale.rerun_level
    assert np.all(outcome.population.distances <= last)
    early = abc_smc(priors, NoisyShifts(), in_turn, fact, fact, precision, strict, seed=0)
    assert not early.converged and "abandoned" in early.verdict
    assert len(early.history) == 1  # abandoned at generation 1, from the prior


def test_a_reporting_precision_coarser_than_the_noise_is_the_unit() -> None:
    """A figure reported to +-3 counts its misses in 3s, however quiet the runs."""
    priors = Priors(("x",), (Prior("uniform", -5.0, 5.0),), {})
    fact = np.array([1.0])
    settings = Settings(particles=40, max_generations=1)
    outcome = abc_smc(priors, NoisyShift(), in_turn, fact, fact, np.array([3.0]), settings, seed=0)
    assert outcome.scale.units[0] == 3.0 and outcome.scale.noise[0] < 3.0


def test_a_run_past_the_cutoff_stops_and_keeps_the_facts_it_read(tmp_path: Path) -> None:
    """Single's facts put the setting beyond a tolerance of 0 (its wall-clock is not 1 s):
    2x2 is never simulated, and what single read is what a full simulation reads."""
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
wall_clock = 1
iterations = 40
[[runs]]
shape = "2x2"
iterations = 10
""")  # fmt: skip
    summaries = read_summaries(path)
    model = run_model(summaries, "x")
    point = model.priors.sample(np.random.default_rng(0), 1)[0]
    facts = summaries.facts
    low = np.array([on_scale(f, f.low) for f in facts])
    high = np.array([on_scale(f, f.high) for f in facts])
    ones = np.ones(len(facts))
    scale = Scale(ones, ones, 0.0, 0.0, 0)
    full = model.figures(point, 7)
    stopped = model.figures(point, 7, Cutoff(scale, low, high, 0.0))
    assert np.array_equal(stopped[:2], full[:2]) and np.isnan(stopped[2])
    assert np.all(np.isfinite(full))
    assert np.array_equal(model.figures(point, 7, Cutoff(scale, low, high, math.inf)), full)


def test_simulated_figures_do_not_depend_on_the_number_of_processes(tmp_path: Path) -> None:
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
wall_clock_minutes = 30
iterations = 40
[[runs]]
shape = "2x2"
full_val_share = 0.5
""")  # fmt: skip
    model = run_model(read_summaries(path), "x")
    assert model.runs == ((0, Shape(1, 1)), (0, Shape(2, 2)))
    points = model.priors.sample(np.random.default_rng(0), 20)
    seeds = list(range(20))
    one = simulate_points(model, points, seeds, LocalBackend(1))
    two = simulate_points(model, points, seeds, LocalBackend(2))
    assert np.array_equal(one, two)
    assert np.all(np.isfinite(one))


# -- recovery ------------------------------------------------------------------


TRUTH = {
    "rollout.scale": 5.0,
    "rollout.s": 0.6,
    "reflection.scale": 8.0,
    "reflection.s": 0.4,
    "acceptance.a0": 0.25,
    "acceptance.correlation": 0.0,
}
SHARP = 2.5  # a fact's predictive interval over one run's, at most


@pytest.mark.slow
def test_summaries_of_simulated_runs_give_a_sharp_posterior_holding_the_truth(
    tmp_path: Path,
) -> None:
    """Simulate runs at known parameters, report their figures, infer, and find the truth,
    no more loosely than the runs' own noise allows.

    Two runs each of single and 2x2 (wall-clock, iterations, full-val share).
    The latencies' log-sds are held at their truth: two runs of a shape cannot
    tell a latency's spread from its median, and a draw with heavier tails
    than the truth's has noisier runs, which is no looseness of the inference.

    (a) The acceptance rate sets the iteration counts: it must be pinned, and
    every parameter's 5-95% posterior interval hold its true value (each a
    90% interval if the posterior is calibrated; seeded, so the outcome is
    fixed). (b) Each fact's 5-95% posterior predictive interval, from the
    written draws (each run twice, as a prediction runs them), is at most
    SHARP times as wide as the 5-95% of 100 runs at the true parameters (one
    run's noise). Measured: at most 2.0 here.
    """
    summaries_setup = Setup(budget=400, valset_size=20, workers=64, trainset_size=60)
    truth = base_scenario(summaries_setup, "truth").with_parameters(TRUTH).replace(seed=11)
    runs, proposals = [], []
    for replicate, shape in enumerate(["single", "single", "2x2", "2x2"]):
        run = simulate_once(truth, Shape.parse(shape), replicate)
        proposals.append(run.iterations * Shape.parse(shape).k)
        runs.append(
            f'[[runs]]\nshape = "{shape}"\nwall_clock = {run.wall_clock}\n'
            f"iterations = {run.iterations}\nfull_val_share = {run.full_val_share}\n"
        )
    path = write(tmp_path, "s.toml", SETUP + "\n".join(runs) + """
[priors]
"acceptance.correlation" = 0.0
"rollout.s" = 0.6
"reflection.s" = 0.4
[inference]
particles = 200
draws = 50
""")  # fmt: skip
    out = tmp_path / "out.toml"
    ran = run_pxn("calibrate", "--summaries", path, "-o", out, "--jobs", "2")
    assert ran.returncode == 0, ran.stderr
    lines = {line.split()[0]: line for line in ran.stdout.splitlines() if line.startswith("  ")}
    assert "pinned" in lines["acceptance.a0"], ran.stdout
    # the report fits a 100-column terminal (but for the line naming the file's path)
    assert max(len(line) for line in ran.stdout.splitlines()[1:]) <= 100, ran.stdout
    scenario = Scenario.load(out)
    assert scenario.uncertainty is not None and len(scenario.uncertainty) == 50
    draws = scenario.uncertainty.draws
    for path_ in scenario.uncertainty.parameters:
        low, high = np.percentile([d[path_] for d in draws], [5, 95])
        assert low <= TRUTH[path_] <= high, (path_, low, high)
    assert scenario.acceptance.correlation == 0.0
    assert "acceptance.correlation" not in scenario.uncertainty.parameters
    # How much run the facts saw: the most proposals, a run's iterations times its k.
    assert scenario.calibrated_on == CalibratedOn(4, metric_calls=400, proposals=max(proposals))

    model = run_model(read_summaries(path), "x")
    facts = model.facts
    at = [[p.to_working(draw[path_]) for path_, p in model.priors] for draw in draws]
    predictive = simulate_points(model, np.array(at * 2), list(range(100)), LocalBackend(2))
    true_point = np.array([p.to_working(TRUTH[path_]) for path_, p in model.priors])
    noise = simulate_points(
        model, np.tile(true_point, (100, 1)), list(range(100, 200)), LocalBackend(2)
    )

    def width(figures: np.ndarray) -> np.ndarray:
        """Of each fact's 5-95% interval, in its own units (a share of 1 is no infinite odds)."""
        ends = [from_scale(f, np.percentile(figures[:, j], [5, 95])) for j, f in enumerate(facts)]
        return np.array([high - low for low, high in ends])

    ratios = width(predictive) / width(noise)
    assert np.all(ratios <= SHARP), dict(zip([f.label for f in facts], ratios, strict=True))
    # A prediction runs replicate r with draw r mod D: the draws are usable as written.
    assert simulate_once(scenario, Shape(2, 2), 3).iterations > 0


def test_a_prior_that_reaches_an_invalid_value_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
iterations = 40
[priors]
"acceptance.correlation" = { uniform = [0, 1] }
""")  # fmt: skip
    summaries = read_summaries(path)
    with pytest.raises(PxnError, match=r"prior of 'acceptance\.correlation'"):
        priors_for(summaries, base_scenario(summaries.setup, "x"))


def test_a_run_spread_can_be_given_a_prior(tmp_path: Path) -> None:
    """Not in the default model, but a parameter like any other: the docs' example holds."""
    path = write(tmp_path, "s.toml", SETUP + """
[[runs]]
shape = "single"
iterations = 40
[priors]
"load.task.run_spread" = { uniform = [0.0, 0.3] }
"load.reflection.run_spread" = { uniform = [0.0, 0.3] }
""")  # fmt: skip
    summaries = read_summaries(path)
    priors = priors_for(summaries, base_scenario(summaries.setup, "x"))
    assert {"load.task.run_spread", "load.reflection.run_spread"} <= set(priors.paths)
    drawn = base_scenario(summaries.setup, "x").with_parameters({"load.task.run_spread": 0.2})
    assert drawn.loads.task.run_spread == 0.2 and drawn.loads.varies_by_run


def test_a_reported_share_is_shown_as_its_prediction_is() -> None:
    share = Fact("single full val share", "full_val_share", 0.17, 0.17, (0,), "0.17")
    assert reported(share) == "17%" and share.shown(0.19) == "19%"
    hours = Fact("single wall clock", "wall_clock", 27720.0, 27720.0, (0,), "7.7 h", "h", 3600.0)
    assert reported(hours) == "7.7 h"  # as the file wrote it


def test_a_posterior_that_predicts_fewer_than_half_its_facts_is_refused():
    """A right model's predictive misses one fact in ten; one that holds fewer than half does
    not describe the runs, and is refused with the facts it missed."""

    def check(name: str, inside: bool) -> FactCheck:
        fact = Fact(name, "seed_score", 0.1, 0.1, (0,), "0.1")
        return FactCheck(fact, 0.5, 0.4, 0.6, 0.0, inside, 0.0, 0.2)

    held = [check(f"run{i} seed score", i < 4) for i in range(7)]
    _refuse_unpredicted(tuple(held))  # 4 of 7: kept
    missed = [check(f"run{i} seed score", i < 3) for i in range(7)]
    with pytest.raises(PxnError, match="holds only 3 of the 7 facts") as raised:
        _refuse_unpredicted(tuple(missed))
    assert "run3 seed score 0.1 (predicted 0.4-0.6)" in str(raised.value)


@dataclass(frozen=True)
class NoisySum:
    """Two parameters, one fact: y = x1 + x2 + N(0, 0.1)."""

    def figures(self, point: np.ndarray, seed: int, cutoff: Cutoff | None) -> np.ndarray:
        return np.array([point[0] + point[1] + 0.1 * np.random.default_rng(seed).normal()])


def test_a_generation_with_one_particle_inside_still_moves_its_copies() -> None:
    """One particle within the tolerance has no spread of its own to step by: the copies
    step by the whole population's (before, its NaN covariance made every step NaN, every
    step was rejected, and the sampler gave up as if the facts were out of reach)."""
    priors = Priors(("x1", "x2"), (Prior("uniform", -5.0, 5.0),) * 2, {})
    rng = np.random.default_rng(0)
    points = rng.uniform(-2, 2, size=(40, 2))
    points[0] = [0.5, 0.5]  # the one setting near the fact y = 1
    figures = points.sum(axis=1, keepdims=True)
    fact = np.ones(1)
    scale = Scale(np.array([0.1]), np.array([0.1]), 1.0, 1.4, 0)
    distances = scale.distance(figures, fact, fact)
    tolerance = float(np.sort(distances)[1]) / 2  # only the first particle is inside
    assert np.sum(distances <= tolerance) == 1
    cutoff = Cutoff(scale, fact, fact, tolerance)
    population = Population(points, figures, distances)
    settings = Settings(particles=40, min_acceptance=0.05)
    result = _generation(priors, NoisySum(), in_turn, cutoff, population, settings, (7, 1))
    assert not isinstance(result, float), f"abandoned: first steps accepted at {result:.1%}"
    moved, _ = result
    assert np.all(np.isfinite(moved.points)) and moved.distinct > 1
