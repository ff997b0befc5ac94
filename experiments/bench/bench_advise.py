"""`pxn advise` on local processes against Ray on one machine: 500 points x 100 replicates.

    .venv/bin/python experiments/bench/bench_advise.py [--repeats 2] [--jobs 2]
        [--address HOST:PORT]

Times the real `advise` (pxn.sim.advise) on the hover preset over a grid of
500 allocations -- P, N and b in 1..5, W in 16/64/256/1024 -- with 100
replicates each and the race off (`--full-grid`), so every allocation costs
the same work on both backends: 50,000 replicates in chunks of 25, 2000
tasks. Each repeat runs it on the local backend (a pool of --jobs processes)
and on Ray (a private local Ray with --jobs CPUs, or the head at --address),
in alternating order, and checks that both give the same advice to the bit
(its CSV). The same 2000 tasks with no replicates ("empty") time the
machinery alone.

Prints the machine, the load before and after each run, each run's
wall-clock, Ray's start-up apart, the in-process CPU cost of one task, and
the overhead Ray adds per task: (Ray wall - local wall) / tasks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from dataclasses import dataclass

from host import machine

from pxn.api.advice_report import advice_report
from pxn.api.report import csv_text
from pxn.sim.advise import Ask, variants
from pxn.sim.advise_search import advise, work_units
from pxn.sim.backends import Backend, LocalBackend, RayBackend, gather
from pxn.sim.predict import simulate_replicates
from pxn.sim.presets import load_scenario

ASK = Ask(
    budget=3000,  # the hover preset's own
    p=(1, 2, 3, 4, 5),
    n=(1, 2, 3, 4, 5),
    b=(1, 2, 3, 4, 5),
    workers=(16, 64, 256, 1024),
    replicates=100,
    race=False,
)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


@dataclass
class Run:
    backend: str
    what: str  # "grid" (the whole advise) or "empty" (its tasks with no replicates)
    wall: float  # seconds, start-up excluded
    driver_cpu: float  # CPU seconds of this process (submitting, collecting, ranking)
    load_before: float  # 1-minute load average
    load_after: float


def timed(name: str, what: str, work) -> tuple[Run, object]:
    load_before = os.getloadavg()[0]
    cpu, start = time.process_time(), time.perf_counter()
    result = work()
    wall, driver = time.perf_counter() - start, time.process_time() - cpu
    run = Run(name, what, wall, driver, load_before, os.getloadavg()[0])
    print(
        f"  {name:>5} {what}: {wall:7.2f} s wall, driver CPU {driver:5.2f} s"
        f" (load {run.load_before:.2f} -> {run.load_after:.2f})",
        flush=True,
    )
    return run, result


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
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="local processes / private Ray CPUs")
    parser.add_argument("--address", help="a running Ray head; default: a private local Ray")
    args = parser.parse_args()

    scenario = load_scenario("hover")
    allocations = ASK.allocations()
    _, units = work_units(variants(scenario, ASK), allocations, range(ASK.replicates))
    # The same tasks with no replicates: what the machinery alone costs.
    empty = [(variant, shape, range(0)) for variant, shape, _ in units]
    print(machine())
    print(f"before: {uptime()}")
    print(
        f"{len(allocations)} allocations x {ASK.replicates} replicates ="
        f" {len(allocations) * ASK.replicates} replicates, {len(units)} tasks; --jobs {args.jobs}"
    )
    cost = cpu_per_task(units, sample=80)
    print(f"in-process CPU per task: {1000 * cost:.2f} ms (x tasks: {cost * len(units):.1f} s)")

    ray = RayBackend(args.address, num_cpus=None if args.address else args.jobs)
    start = time.perf_counter()
    ray.open()
    startup = time.perf_counter() - start
    how = f"connect to {args.address}" if args.address else "start a private one"
    print(f"ray start-up ({how}): {startup:.2f} s")
    runs: list[Run] = []
    expected: str | None = None
    try:
        for repeat in range(args.repeats):
            order: list[tuple[str, Backend]] = [("local", LocalBackend(args.jobs)), ("ray", ray)]
            if repeat % 2:
                order.reverse()  # alternate, so a drift in the machine's load hits both
            for name, backend in order:
                run, advice = timed(name, "grid", lambda b=backend: advise(scenario, ASK, b))
                runs.append(run)
                csv = csv_text(advice_report(advice).rows)  # the CLI's --format csv
                if expected is None:
                    expected = csv
                    print(f"  recommended: {advice.recommended.allocation.label}")
                elif csv != expected:
                    raise SystemExit(f"{name}: advice differs from the first run's to the bit")
                bare = lambda b=backend: gather(b, simulate_replicates, empty)  # noqa: E731
                runs.append(timed(name, "empty", bare)[0])
    finally:
        ray.close()

    print(f"medians over {args.repeats} runs each, {len(units)} tasks:")
    for name in ("local", "ray"):
        wall = median(runs, name, "grid", "wall")
        driver = median(runs, name, "grid", "driver_cpu")
        bare = median(runs, name, "empty", "wall")
        print(
            f"  {name:>5}: advise {wall:6.2f} s wall ({1000 * wall / len(units):5.2f} ms a task),"
            f" driver CPU {driver:5.2f} s ({1000 * driver / len(units):4.2f} ms a task);"
            f" empty tasks {bare:5.2f} s ({1000 * bare / len(units):5.2f} ms a task)"
        )

    def per_task(what: str) -> float:
        gap = median(runs, "ray", what, "wall") - median(runs, "local", what, "wall")
        return 1000 * gap / len(units)

    print(
        f"ray - local, wall per task: advise {per_task('grid'):+.2f} ms,"
        f" empty {per_task('empty'):+.2f} ms"
    )
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
