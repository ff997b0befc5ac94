"""Local processes against Ray on one machine: a 576-point grid x 100 replicates.

    .venv/bin/python experiments/bench/bench_ray.py [--fraction 0.25] [--repeats 2]
        [--jobs 2] [--address HOST:PORT]

`pxn advise` does not exist yet; this times the work it will hand a backend:
every (scenario, shape) point of a grid on the hover preset (P in 1..8,
N in 1..8, W in 16/64/256, b in 1..3: 576 points), 100 replicates each, cut
into the chunks `sweep` uses (25 replicates, so 4 tasks a point). Each repeat
runs the same units on the local backend (a pool of --jobs processes) and on
Ray (a private local Ray with --jobs CPUs, or the head at --address), in
alternating order, and checks that both return the same results to the bit.

Prints the machine, the load before and after each run, each run's
wall-clock, Ray's start-up apart, the in-process CPU cost of one task, and the
overhead Ray adds per task: (Ray wall - local wall) / tasks.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass

from pxn.scenario import Scenario, Shape
from pxn.sim.backends import Backend, LocalBackend, RayBackend, gather
from pxn.sim.predict import CHUNK, simulate_replicates
from pxn.sim.presets import load_scenario

REPLICATES = 100
WORKERS = (16, 64, 256)
MINIBATCHES = (1, 2, 3)


def grid(base: Scenario) -> list[tuple[Scenario, Shape]]:
    return [
        (base.replace(workers=w, minibatch=b), Shape(p, n))
        for w in WORKERS
        for b in MINIBATCHES
        for p in range(1, 9)
        for n in range(1, 9)
    ]


def units_of(points: list[tuple[Scenario, Shape]]) -> list[tuple]:
    return [
        (scenario, shape, range(i, min(i + CHUNK, REPLICATES)))
        for scenario, shape in points
        for i in range(0, REPLICATES, CHUNK)
    ]


def machine() -> str:
    cpu = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measured(scenario: Scenario, shape: Shape, replicates: range) -> tuple[list, float, int]:
    """One unit of sweep's work, with the CPU it took inside the worker and the worker's pid.

    Defined here, in __main__: Ray ships it by value, the fork-started local
    pool finds it by name.
    """
    start = time.process_time()
    runs = simulate_replicates(scenario, shape, replicates)
    return runs, time.process_time() - start, os.getpid()


@dataclass
class Run:
    backend: str
    what: str  # "grid" or "empty"
    wall: float  # seconds, start-up excluded
    task_cpu: float  # CPU seconds spent inside the tasks, summed
    driver_cpu: float  # CPU seconds of this process (submitting, collecting)
    workers: int  # distinct worker processes that ran tasks
    load_before: float  # 1-minute load average
    load_after: float


def timed(name: str, what: str, backend: Backend, units: list[tuple]) -> tuple[Run, list]:
    load_before = os.getloadavg()[0]
    cpu, start = time.process_time(), time.perf_counter()
    results = gather(backend, measured, units)
    wall, driver = time.perf_counter() - start, time.process_time() - cpu
    runs = [r for r, _, _ in results]
    task_cpu = sum(c for _, c, _ in results)
    run = Run(
        name, what, wall, task_cpu, driver, len({pid for *_, pid in results}),
        load_before, os.getloadavg()[0],
    )  # fmt: skip
    print(
        f"  {name:>5} {what}: {wall:7.2f} s wall, {1000 * wall / len(units):6.2f} ms a task;"
        f" CPU in tasks {task_cpu:6.2f} s, driver {driver:5.2f} s, {run.workers} workers"
        f" (load {run.load_before:.2f} -> {run.load_after:.2f})",
        flush=True,
    )
    return run, runs


def cpu_per_task(units: list[tuple], sample: int) -> float:
    """In-process CPU seconds per task, over every len/sample-th unit: the work itself."""
    picked = units[:: max(1, len(units) // sample)]
    start = time.process_time()
    for unit in picked:
        simulate_replicates(*unit)
    return (time.process_time() - start) / len(picked)


def median(runs: list[Run], backend: str, what: str, field: str) -> float:
    return statistics.median(
        getattr(r, field) for r in runs if (r.backend, r.what) == (backend, what)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=1.0, help="share of the grid to run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="local processes / private Ray CPUs")
    parser.add_argument("--address", help="a running Ray head; default: a private local Ray")
    args = parser.parse_args()

    points = grid(load_scenario("hover"))
    points = points[:: max(1, round(1 / args.fraction))] if args.fraction < 1 else points
    units = units_of(points)
    # The same number of tasks with no replicates: what the machinery alone costs.
    empty = [(scenario, shape, range(0)) for scenario, shape, _ in units]
    print(machine())
    print(f"before: {uptime()}")
    print(
        f"{len(points)} points x {REPLICATES} replicates = {len(points) * REPLICATES} replicates,"
        f" {len(units)} tasks of {CHUNK}; --jobs {args.jobs}"
    )
    cost = cpu_per_task(units, sample=96)
    total = cost * len(units)
    print(f"in-process CPU per task: {1000 * cost:.2f} ms (x tasks: {total:.1f} s)")

    ray = RayBackend(args.address, num_cpus=None if args.address else args.jobs)
    start = time.perf_counter()
    ray.open()
    startup = time.perf_counter() - start
    how = f"connect to {args.address}" if args.address else "start a private one"
    print(f"ray start-up ({how}): {startup:.2f} s")
    runs: list[Run] = []
    expected: list | None = None
    try:
        for repeat in range(args.repeats):
            order: list[tuple[str, Backend]] = [("local", LocalBackend(args.jobs)), ("ray", ray)]
            if repeat % 2:
                order.reverse()  # alternate, so a drift in the machine's load hits both
            for name, backend in order:
                run, results = timed(name, "grid", backend, units)
                runs.append(run)
                if expected is None:
                    expected = results
                elif results != expected:
                    raise SystemExit(f"{name}: results differ from the first run's to the bit")
                runs.append(timed(name, "empty", backend, empty)[0])
    finally:
        ray.close()

    print(f"medians over {args.repeats} runs each, {len(units)} tasks:")
    for name in ("local", "ray"):
        wall = median(runs, name, "grid", "wall")
        task_cpu = median(runs, name, "grid", "task_cpu")
        bare = median(runs, name, "empty", "wall")
        print(
            f"  {name:>5}: grid {wall:6.2f} s wall ({1000 * wall / len(units):5.2f} ms a task),"
            f" CPU in tasks {task_cpu:6.2f} s ({1000 * task_cpu / len(units):5.2f} ms a task);"
            f" empty tasks {bare:5.2f} s ({1000 * bare / len(units):5.2f} ms a task)"
        )

    def per_task(what: str) -> float:
        gap = median(runs, "ray", what, "wall") - median(runs, "local", what, "wall")
        return 1000 * gap / len(units)

    print(
        f"ray - local, wall per task: grid {per_task('grid'):+.2f} ms,"
        f" empty {per_task('empty'):+.2f} ms"
    )
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
