"""`pxn calibrate --summaries`: the file formats, refusals, the ABC-SMC sampler, and recovery.

Statistical tests are seeded, so each is deterministic; their significance is
stated where they assert an interval.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, run_pxn

from pxn.acceptance import Acceptance
from pxn.calibrate.abc_smc import Settings, abc_smc, weighted_quantiles
from pxn.calibrate.from_summaries import RunModel, base_scenario, priors_for, simulate_points
from pxn.calibrate.priors import Prior, Priors
from pxn.calibrate.summaries import read_summaries
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import RunSummary

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


def test_sweep_speedups_read_the_right_runs() -> None:
    """most_speedup: the value more than half the batched runs reach; fastest: the top."""
    from pxn.calibrate.summaries import Fact

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
    assert_user_error(ran, "did not converge", "nothing was written")
    assert not out.exists()


# -- the sampler -----------------------------------------------------------------


def test_abc_smc_recovers_a_normal_posterior() -> None:
    """y = x + N(0, 1) observed at y = 1 under a flat prior: the posterior is N(1, 1).

    ABC's tolerance widens it a little; the bounds (median within 0.25 of 1,
    IQR within [1.0, 2.0] against the exact 1.35) leave room for that and for
    the Monte Carlo error of 400 particles (median sd ~0.07).
    """
    priors = Priors(("x",), (Prior("uniform", -5.0, 5.0),), {})

    def simulate(points: np.ndarray, seeds: list[int]) -> np.ndarray:
        noise = np.array([np.random.default_rng(s).normal() for s in seeds])
        return (points[:, 0] + noise)[:, None]

    outcome = abc_smc(priors, simulate, np.array([1.0]), np.array([1.0]), Settings(), seed=3)
    assert outcome.converged, outcome.verdict
    q25, median, q75 = outcome.population.quantiles(0, [0.25, 0.5, 0.75])
    assert abs(median - 1.0) < 0.25
    assert 1.0 <= q75 - q25 <= 2.0
    again = abc_smc(priors, simulate, np.array([1.0]), np.array([1.0]), Settings(), seed=3)
    assert np.array_equal(again.population.points, outcome.population.points)


def test_weighted_quantiles_follow_the_weights() -> None:
    values = np.array([1.0, 2.0, 3.0])
    assert weighted_quantiles(values, np.array([0.0, 0.0, 1.0]), [0.5])[0] == 3.0
    assert weighted_quantiles(values, np.array([1.0, 1.0, 1.0]), [0.5])[0] == 2.0


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
    summaries = read_summaries(path)
    base = base_scenario(summaries.setup, "x")
    priors = priors_for(summaries, base)
    model = RunModel((base,), ((0, Shape(1, 1)), (0, Shape(2, 2))), summaries.facts, priors)
    points = priors.sample(np.random.default_rng(0), 20)
    seeds = list(range(20))
    one = simulate_points(model, points, seeds, jobs=1)
    two = simulate_points(model, points, seeds, jobs=2)
    assert np.array_equal(one, two)
    assert np.all(np.isfinite(one))


# -- recovery ------------------------------------------------------------------


@pytest.mark.slow
def test_summaries_of_simulated_runs_recover_their_parameters(tmp_path: Path) -> None:
    """Simulate runs at known parameters, report their figures, infer, and find the truth.

    Two runs each of single and 4x4 (wall-clock, iterations, full-val share).
    The acceptance rate sets the iteration counts, the rollout latency the
    wall-clocks: both must be pinned, and each 5-95% posterior interval hold
    its true value (each a 90% interval if the posterior is calibrated).
    """
    truth = Scenario(
        name="truth", budget=400, valset_size=20, trainset_size=60, workers=64,
        rollout=Distribution("lognorm", {"s": 0.6, "scale": 5.0}),
        reflection=Distribution("lognorm", {"s": 0.4, "scale": 8.0}),
        acceptance=Acceptance(0.25), seed=11,
    ).validate()  # fmt: skip
    runs = []
    for replicate, shape in enumerate(["single", "single", "4x4", "4x4"]):
        run = simulate_once(truth, Shape.parse(shape), replicate)
        runs.append(
            f'[[runs]]\nshape = "{shape}"\nwall_clock = {run.wall_clock}\n'
            f"iterations = {run.iterations}\nfull_val_share = {run.full_val_share}\n"
        )
    path = write(tmp_path, "s.toml", SETUP + "\n".join(runs) + """
[priors]
"acceptance.correlation" = 0.0
[inference]
particles = 200
draws = 50
""")  # fmt: skip
    out = tmp_path / "out.toml"
    ran = run_pxn("calibrate", "--summaries", path, "-o", out, "--jobs", "2")
    assert ran.returncode == 0, ran.stderr
    lines = {line.split()[0]: line for line in ran.stdout.splitlines() if line.startswith("  ")}
    assert "pinned" in lines["acceptance.a0"]
    scenario = Scenario.load(out)
    assert scenario.uncertainty is not None and len(scenario.uncertainty) == 50
    draws = scenario.uncertainty.draws
    for path_, true in (("acceptance.a0", 0.25), ("rollout.scale", 5.0)):
        low, high = np.percentile([d[path_] for d in draws], [5, 95])
        assert low <= true <= high, (path_, low, high)
    assert scenario.acceptance.correlation == 0.0
    assert "acceptance.correlation" not in scenario.uncertainty.parameters
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
