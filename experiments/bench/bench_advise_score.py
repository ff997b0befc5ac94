"""`pxn advise --objective score` on issue #26's grid: wall-clock and CPU through the CLI.

    .venv/bin/python experiments/bench/bench_advise_score.py [--repeats 2] [--objective score]
    .venv/bin/python experiments/bench/bench_advise_score.py --budget EIGHT   # issue #30

Runs the real command, a child process each time, on the livebench-math preset (its
quality model):

    pxn advise livebench-math --budget 5000 --objective score --p 1..8 --n 1..8
        --minibatch 1,2,3,4 --workers 64,128,256,512 --jobs 2

1,024 allocations. `--budget` replaces the budget: `EIGHT` is issue #30's eight
budgets up to the same 5000 (500,1000,1500,2000,2500,3000,4000,5000), each setup one
simulation a replicate read at every budget; any list the command takes works too.
Prints the machine, the load before and after each run, its wall-clock and its CPU
(the children's user + system time: the command's processes), and the search line the
advice printed (how many allocations each round of the race kept). `--objective time`
times the same grid ranked by wall-clock. No test asserts a time; the figures are for
reading (experiments/bench/README.md).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import load, machine

PXN = Path(sys.executable).parent / "pxn"
GRID = ["--p", "1..8", "--n", "1..8", "--minibatch", "1,2,3,4", "--workers", "64,128,256,512"]
EIGHT = "500,1000,1500,2000,2500,3000,4000,5000"  # issue #30: eight budgets, the same largest


def one_run(objective: str, budget: str) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, the advice's search line) of one run of the command."""
    command = [str(PXN), "advise", "livebench-math", "--budget", budget, "--objective",
               objective, *GRID, "--jobs", "2"]  # fmt: skip
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(
        command, check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    search = next(line for line in done.stdout.splitlines() if line.startswith("search:"))
    return wall, cpu, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--objective", default="score", choices=("score", "time"))
    parser.add_argument("--budget", default="5000", help="the budget(s); EIGHT: issue #30's")
    args = parser.parse_args()
    budget = EIGHT if args.budget == "EIGHT" else args.budget
    print(machine())
    print(f"--budget {budget} --objective {args.objective}")
    for repeat in range(1, args.repeats + 1):
        before = load()
        wall, cpu, search = one_run(args.objective, budget)
        print(f"run {repeat}: wall {wall:.1f} s, CPU {cpu:.1f} s (load before {before}, "
              f"after {load()})")  # fmt: skip
        print(f"  {search}")


if __name__ == "__main__":
    main()
