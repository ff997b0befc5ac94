"""`--backend ray` against a real Ray head on 127.0.0.1: the same predictions, to the bit.

One head (ray_heads.started_head, 2 CPUs) serves the whole module, with a
token made for it that this process's drivers get too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, run_pxn_script
from ray_heads import free_port, started_head, token_auth
from sim_helpers import make_scenario

from pxn.errors import PxnError
from pxn.scenario import Uncertainty
from pxn.shape import Shape
from pxn.sim.backends import WINDOW_MIN, LocalBackend, RayBackend, gather, make_backend
from pxn.sim.predict import simulate_replicates, sweep

pytestmark = pytest.mark.slow


@dataclass
class Head:
    address: str
    env: dict[str, str]  # what a client of this head needs in its environment
    log: list[str]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Head]:
    auth = token_auth()
    saved = {key: os.environ.get(key) for key in auth}
    with started_head({**os.environ, **auth}, num_cpus=2) as (address, log):
        os.environ.update(auth)  # for the drivers this test process starts
        try:
            yield Head(address, auth, log)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def test_library_sweep_on_the_head_equals_local(ray_head: Head) -> None:
    scenario = make_scenario()
    scale = scenario.rollout.params["scale"]
    draws = tuple({"rollout.scale": scale * f} for f in (0.5, 1.0, 2.0))
    uncertain = scenario.replace(uncertainty=Uncertainty("test", draws))
    shapes = [Shape(2, 2), Shape(4, 1)]  # single is added: 3 shapes x 3 chunks (25, 25, 10)
    local = sweep(scenario, shapes, 60, jobs=1)
    told: list[int] = []
    with RayBackend(ray_head.address) as backend:
        on_ray = sweep(scenario, shapes, 60, on_progress=told.append, backend=backend)
        again = sweep(scenario, shapes, 60, backend=backend)  # one connection, many sweeps
        drawn = sweep(uncertain, shapes, 60, backend=backend)  # replicate r runs draw r mod 3
    assert on_ray == local
    assert again == local
    assert drawn == sweep(uncertain, shapes, 60, jobs=1) != local
    assert sorted(told) == sorted([25, 25, 10] * 3)


def test_gather_puts_results_in_unit_order(ray_head: Head) -> None:
    # Big units first, small last: on two CPUs the small ones finish first, and
    # gather must still hand every result back in unit order. 46 units: more
    # than the backend keeps in flight on 2 CPUs (16), so refilling is used too.
    scenario, shape = make_scenario(), Shape(1, 1)
    units = [(scenario, shape, range(start, start + size)) for start, size in
             [(0, 30), (30, 20), (50, 1), (51, 1), (52, 5), (57, 1)]]  # fmt: skip
    units += [(scenario, shape, range(r, r + 1)) for r in range(58, 98)]
    assert len(units) > WINDOW_MIN
    expected = [simulate_replicates(*unit) for unit in units]
    finished: list[int] = []
    with RayBackend(ray_head.address) as backend:
        got = gather(backend, simulate_replicates, units, lambda i, _: finished.append(i))
    assert got == expected
    assert sorted(finished) == list(range(len(units)))
    assert gather(LocalBackend(2), simulate_replicates, units) == expected


def test_cli_sweep_and_simulate_on_the_head_equal_local(tmp_path: Path, ray_head: Head) -> None:
    scenario = tmp_path / "small.toml"
    make_scenario(budget=200).save(scenario)
    common = ["--reps", "30", "--seed", "7", "--format", "json"]
    sweep_args = ["sweep", scenario, "--shapes", "single,2x2", *common]
    local = run_pxn_script(*sweep_args, "--backend", "local", "--jobs", "1")
    on_ray = run_pxn_script(*sweep_args, "--backend", "ray", "--address", ray_head.address)
    assert local.returncode == 0, local.stderr
    assert on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout
    assert len(json.loads(on_ray.stdout)["predictions"]) == 2

    simulate_args = ["simulate", scenario, "--shape", "2x2", "--reps", "30", "--seed", "7"]
    local = run_pxn_script(*simulate_args)
    on_ray = run_pxn_script(*simulate_args, "--backend", "ray", "--address", ray_head.address)
    assert on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout


def test_advise_on_the_head_equals_local_raced_or_not(tmp_path: Path, ray_head: Head) -> None:
    """`pxn advise --backend ray`: the same advice to the bit, a race included.

    A grid of 72 allocations is raced (over 64): a first round, then a second
    on the contenders; both rounds' work goes to the head.
    """
    scenario = tmp_path / "small.toml"
    make_scenario(budget=200).save(scenario)
    args = ["advise", scenario, "--budget", "200", "--p", "1..3", "--n", "1..3"]
    args += ["--minibatch", "1..2", "--workers", "4,8,16,32", "--reps", "24", "--format", "json"]
    local = run_pxn_script(*args, "--backend", "local", "--jobs", "1")
    on_ray = run_pxn_script(*args, "--backend", "ray", "--address", ray_head.address)
    assert local.returncode == 0, local.stderr
    assert on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout
    advice = json.loads(on_ray.stdout)
    assert advice["search"].startswith("raced 72 allocations")
    assert {row["replicates"] for row in advice["allocations"]} == {20, 24}


def test_private_local_ray_without_address_equals_local(tmp_path: Path) -> None:
    # No --address: a Ray instance of --jobs CPUs for this command alone.
    args = ["simulate", "hover", "--shape", "2x2", "--reps", "30", "--seed", "3"]
    local = run_pxn_script(*args)
    on_ray = run_pxn_script(*args, "--backend", "ray", "--jobs", "1")
    assert on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout


def test_unreachable_address_is_one_line_and_exit_2() -> None:
    port = free_port()
    result = run_pxn_script(
        "sweep", "hover", "--reps", "5", "--backend", "ray", "--address", f"127.0.0.1:{port}"
    )
    assert_user_error(result, f"cannot reach a Ray head at 127.0.0.1:{port}", "ray start --head")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--backend", "ray", "--address", "127.0.0.1"], "--address is HOST:PORT"),
        (["--backend", "ray", "--address", "host:99999"], "--address is HOST:PORT"),
        (["--backend", "spark"], "--backend is local or ray: got 'spark'"),
        (["--address", "127.0.0.1:6379"], "--address is for the ray backend"),
    ],
)
def test_bad_backend_flags_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    assert_user_error(run_pxn_script("sweep", "hover", "--reps", "5", *args), fragment)


def test_missing_ray_names_the_extra() -> None:
    # The CLI in a fresh interpreter where `import ray` fails, as without the extra.
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "sys.argv = ['pxn', 'sweep', 'hover', '--reps', '5', '--backend', 'ray']\n"
        "from pxn.app.cli import main; main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert_user_error(result, "--backend ray needs Ray", "pip install 'gepa-pxn[ray]'")


def test_make_backend_refuses_zero_jobs() -> None:
    with pytest.raises(PxnError, match=r"^jobs must be >= 1"):
        make_backend("ray", None, 0)


def test_an_inference_on_the_head_equals_local(tmp_path: Path, ray_head: Head) -> None:
    """calibrate --summaries spread over Ray: the same ABC-SMC population, to the bit, as on
    local processes (its simulations come back in order and draw from their own seeds)."""
    from pxn.calibrate.summaries.abc_smc import Settings, abc_smc
    from pxn.calibrate.summaries.infer import on_scale, run_model, spread_over
    from pxn.calibrate.summaries.reading import read_summaries

    path = tmp_path / "s.toml"
    path.write_text(
        "[setup]\nbudget = 400\nvalset_size = 20\ntrainset_size = 60\nworkers = 64\n"
        '[[runs]]\nshape = "single"\nwall_clock_minutes = 30\niterations = 40\n'
        '[[runs]]\nshape = "2x2"\nfull_val_share = 0.5\n',
        encoding="utf-8",
    )
    model = run_model(read_summaries(path), "x")
    facts = model.facts
    low = np.array([on_scale(f, f.low) for f in facts])
    high = np.array([on_scale(f, f.high) for f in facts])
    precision = np.zeros(len(facts))
    settings = Settings(particles=24, max_generations=2, pilot_settings=4, pilot_replicates=3)

    def population(backend) -> tuple:
        result = abc_smc(model.priors, model, spread_over(backend), low, high, precision,
                         settings, seed=5)  # fmt: skip
        return result.population.points.tolist(), result.population.figures.tolist()

    local = population(LocalBackend(1))
    with RayBackend(ray_head.address) as backend:
        assert population(backend) == local
