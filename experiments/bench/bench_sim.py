"""How fast is the simulator? Replicates per second, and the paper sweep's wall time.

    .venv/bin/python experiments/bench/bench_sim.py [--quick] [--rate-limits-only]
    .venv/bin/python experiments/bench/bench_sim.py --effects-only [--quick]

Measures, in this one process, simulated replicates per second of the fast
model (pxn.sim.model) and of the per-rollout oracle (tests/oracle.py) on the
livebench-math preset (B=5000, W=512) at single, 2x2 and 8x2, and their ratio;
then times the real `pxn sweep livebench-math --reps 200 --jobs 2` command;
then the fast model on `pxn advise`'s worked example (a hosted API with
provider rate limits, experiments/advise_example/livebench-math-api.toml) at
W=128 and W=512, with its limits and without them; then the core loop at 2x2
on livebench-math with no effect and with every effect the scenario can
have (`every_effect`), with and without its provider limits, against the
oracle on the same scenarios.
Prints the machine and its load before and after, since other processes
sharing the cores change every figure here.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the oracle lives with the tests

import dataclasses  # noqa: E402

import numpy as np  # noqa: E402
from host import load, machine  # noqa: E402
from oracle import oracle_once  # noqa: E402

from pxn.acceptance import Acceptance  # noqa: E402
from pxn.load import Load, Loads  # noqa: E402
from pxn.rate_limits import RateLimit, RateLimits  # noqa: E402
from pxn.scenario import Scenario  # noqa: E402
from pxn.shape import Shape  # noqa: E402
from pxn.sim.model import simulate_once  # noqa: E402
from pxn.sim.presets import load_scenario  # noqa: E402

SHAPES = [Shape(1, 1), Shape(2, 2), Shape(8, 2)]
API_EXAMPLE = ROOT / "experiments" / "advise_example" / "livebench-math-api.toml"
LIMITED_SHAPES = [Shape(1, 1), Shape(2, 2), Shape(8, 8)]


def rate(run_one, seconds: float) -> tuple[float, float]:
    """Replicates per CPU second and per wall second, running replicates 0, 1, ...

    CPU time is what this process got; on a shared, loaded machine it is the
    steadier figure, and the wall-clock rate is the one a user sees.
    """
    run_one(0)  # warm caches (scipy distribution objects, imports)
    done, cpu, wall = 0, time.process_time(), time.perf_counter()
    while (time.process_time() - cpu) < seconds or done < 3:
        run_one(done)
        done += 1
    return done / (time.process_time() - cpu), done / (time.perf_counter() - wall)


def time_sweep(repeats: int) -> list[float]:
    pxn = Path(sys.executable).parent / "pxn"
    command = [str(pxn), "sweep", "livebench-math", "--reps", "200", "--jobs", "2"]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([*command, "--format", "csv"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def rate_limited(window: float) -> None:
    """The advise example with its rate limits (token buckets) and without them."""
    scenario = load_scenario(str(API_EXAMPLE))
    print(f"{API_EXAMPLE.name}: replicates per CPU second (per wall second)")
    print(f"{'W':>4} {'shape':>6} {'limited':>15} {'unlimited':>15} {'throttled/rep':>14}")
    for workers in (128, 512):
        limited = scenario.replace(workers=workers)
        unlimited = limited.replace(rate_limits=RateLimits())
        for shape in LIMITED_SHAPES:
            with_limits = rate(lambda r, sc=limited, s=shape: simulate_once(sc, s, r), window)
            without = rate(lambda r, sc=unlimited, s=shape: simulate_once(sc, s, r), window)
            throttled = statistics.mean(
                simulate_once(limited, shape, r).throttled_calls for r in range(5)
            )
            print(
                f"{workers:>4} {shape.label:>6} {with_limits[0]:>7.1f} /{with_limits[1]:>6.1f}"
                f" {without[0]:>7.1f} /{without[1]:>6.1f} {throttled:>14.0f}"
            )


def no_effect() -> Scenario:
    """livebench-math's workload (the advise example's copy of the preset) with no effect on."""
    api = load_scenario(str(API_EXAMPLE))
    return api.replace(tokens=None, prices=None, rate_limits=RateLimits())


def every_effect() -> Scenario:
    """The same workload with every effect a scenario can have, each where it matters.

    A task model on 256 servers slowing 0.2% per call in flight and a reflection
    model on 8 slowing 5%; rollouts timed out at 120 s and retried once, full
    validation a latency of its own; an acceptance of 0.3 decaying over 300
    proposals and held after 600, correlated 0.2 within a step; parents from half
    the pool; one selected child in ten a repeat; the advise example's tokens and
    litellm prices, its reflection limit, and a task limit of 300 rpm that binds
    at times.
    """
    api = load_scenario(str(API_EXAMPLE))
    rollout = dataclasses.replace(api.rollout, cap=120.0, cap_retries=1)
    full_val = dataclasses.replace(rollout, params={"s": 1.0, "scale": 9.0})
    return api.replace(
        loads=Loads(
            Load(servers=256, slowdown=0.002, run_spread=0.1),
            Load(servers=8, slowdown=0.05, run_spread=0.1),
        ),
        rollout=rollout,
        rollout_phases={"full_val": full_val},
        acceptance=Acceptance(0.3, tau=300.0, decay_until=600.0, correlation=0.2),
        front_share=0.5,
        duplicate_children=0.1,
        rate_limits=dataclasses.replace(
            api.rate_limits, task=RateLimit(rpm=300, tpm=api.rate_limits.task.tpm)
        ),
    )


def effects(window: float) -> None:
    """The core loop at 2x2: no effect, every effect, every effect but limits; the oracle."""
    shape = Shape(2, 2)
    print("core loop at 2x2, livebench-math: replicates per CPU second (per wall second)")
    print(f"{'scenario':>13} {'fast':>15} {'oracle':>15} {'ratio (CPU)':>12} {'throttled/rep':>14}")
    every = every_effect()
    scenarios = {
        "no effect": no_effect(),
        "every effect": every,
        "no limits": every.replace(rate_limits=RateLimits()),  # every effect but the limits
    }
    for name, scenario in scenarios.items():
        fast = rate(lambda r, sc=scenario: simulate_once(sc, shape, r), window)
        oracle = rate(
            lambda r, sc=scenario: oracle_once(sc, shape, np.random.default_rng([99, r])), window
        )
        throttled = statistics.mean(
            simulate_once(scenario, shape, r).throttled_calls for r in range(5)
        )
        print(
            f"{name:>13} {fast[0]:>7.1f} /{fast[1]:>6.1f} {oracle[0]:>7.2f} /{oracle[1]:>6.2f}"
            f" {fast[0] / oracle[0]:>11.1f}x {throttled:>14.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    parser.add_argument(
        "--rate-limits-only", action="store_true", help="only the rate-limited scenario"
    )
    parser.add_argument(
        "--effects-only", action="store_true", help="only the core loop with and without effects"
    )
    args = parser.parse_args()
    window = 1.0 if args.quick else 4.0

    print(machine())
    print(f"before: {load()}")
    if args.rate_limits_only or args.effects_only:
        (rate_limited if args.rate_limits_only else effects)(window)
        print(f"after: {load()}")
        return
    scenario = load_scenario("livebench-math")
    print("replicates per second, one process (per CPU second / per wall second)")
    print(f"{'shape':>6} {'fast':>15} {'oracle':>15} {'ratio (CPU)':>12}")
    for shape in SHAPES:
        fast = rate(lambda r, s=shape: simulate_once(scenario, s, r), window)
        oracle = rate(
            lambda r, s=shape: oracle_once(scenario, s, np.random.default_rng([99, r])), window
        )
        print(
            f"{shape.label:>6} {fast[0]:>7.1f} /{fast[1]:>6.1f}"
            f" {oracle[0]:>7.2f} /{oracle[1]:>6.2f}"
            f" {fast[0] / oracle[0]:>11.1f}x"
        )
    times = time_sweep(1 if args.quick else 3)
    print(
        "pxn sweep livebench-math --reps 200 --jobs 2 (nine shapes): "
        f"median {statistics.median(times):.2f} s, min {min(times):.2f} s over {len(times)}"
    )
    rate_limited(window)
    effects(window)
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
