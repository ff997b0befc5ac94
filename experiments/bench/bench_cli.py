"""How fast is the `pxn` command itself? Replicates per CPU second through the CLI.

    .venv/bin/python experiments/bench/bench_cli.py [--quick] [--profile] [--repeats N]

Runs the real `pxn` command (a child process each time) and reads the CPU
time it spent (user + system, getrusage of the children) beside its
wall-clock: the machine may be shared, and CPU time is what the command
itself cost. On two scenarios: the `livebench-math` preset as it stands, and
"every effect", that preset with every optional part of a scenario set
(tokens, prices, rate limits, load slowdown and run spread, a capped tail
with a retry, a phase's own latency, decaying and correlated acceptance with
a batched step's own rate, front share, duplicate children, skipped parents,
stage overhead) on top of its parameter draws; and every effect but the
provider limits. To measure another checkout, run this with PYTHONPATH
pointing at it (see ab.py).

1. Start-up: `pxn --help` (interpreter, typer, rich); the imports a
   prediction needs (pxn.sim.predict: numpy, scipy.stats, simpy); those plus
   loading the scenario (parsing it, validating each parameter draw).
2. `pxn simulate SCENARIO --shape 2x2 --jobs 1 --reps R` at a low and a high
   R, both above the baseline: it simulates R replicates of 2x2 and, for every
   speedup's baseline, single's replicates_of (200, or one per parameter draw
   if more). Sustained: (high - low) replicates of 2x2 over the CPU seconds
   between the two runs; end to end: R over all of a run's CPU.
3. The core loop: the same replicates (simulate_once, 2x2 and single, each
   shape apart) in this process, per CPU second; 2x2's is what the CLI would
   sustain if it cost nothing of its own.
4. `pxn sweep livebench-math --reps 200 --jobs 2` (nine shapes): wall-clock
   and CPU time.

With --profile, cProfile of step 2 at R = 200 in a child: the share of its
time in imports, loading, simulating, summarising and the closed form.
No test asserts a time; these figures are for reading.
"""

from __future__ import annotations

import argparse
import dataclasses
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import load, machine

from pxn.acceptance import Acceptance
from pxn.load import Load, Loads
from pxn.rate_limits import RateLimits
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.sim.presets import load_scenario

ROOT = Path(__file__).resolve().parents[2]
PXN = Path(sys.executable).parent / "pxn"
API_EXAMPLE = ROOT / "experiments" / "advise_example" / "livebench-math-api.toml"
SHAPES = (Shape(2, 2), Shape(1, 1))  # what `pxn simulate --shape 2x2` runs
# Functions whose cumulative time --profile reports, by name, and what they are.
PARTS = {
    "_find_and_load": "imports",
    "load": "Scenario.load (parse, validate, validate_draws)",
    "validate_draws": "  of which validating the draws",
    "simulate_once": "simulating replicates",
    "for_replicate": "  of which applying a draw (Scenario.for_replicate)",
    "summarize_replicates": "summarising replicates",
    "analytic": "  of which the closed form",
    "print": "printing the tables",
}


def every_effect(path: Path) -> Path:
    """The livebench-math preset with every optional part of a scenario set, as TOML."""
    preset = load_scenario("livebench-math")
    api = load_scenario(str(API_EXAMPLE))
    # What the preset already sets, it keeps; the rest comes from the API example or is made
    # up. Its search stays the preset's: a quality model, or acceptance rates made to decay.
    search = {}
    if preset.acceptance is not None:
        correlation = preset.acceptance.correlation or 0.2
        search["acceptance"] = Acceptance(
            preset.acceptance.a0, 2000.0, 1500.0, correlation, batched=0.8
        )
    scenario = preset.replace(
        name="livebench-math-every-effect",
        tokens=preset.tokens or api.tokens,
        prices=preset.prices or api.prices,
        rate_limits=api.rate_limits,
        loads=Loads(Load(None, 0.0005, run_spread=0.1), Load(None, 0.01, run_spread=0.1)),
        rollout=dataclasses.replace(preset.rollout, cap=600.0, cap_retries=1),
        rollout_phases={"full_val": preset.rollout},
        **search,
        front_share=0.5,
        duplicate_children=0.05,
        skip_perfect=0.05,
        stage_overhead=0.5,
    )
    scenario.validate_draws()
    scenario.save(path)
    return path


def without_limits(every: Path, path: Path) -> Path:
    """That scenario with no provider limits (the issue's effects without them)."""
    Scenario.load(every).replace(rate_limits=RateLimits()).save(path)
    return path


def run(command: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `command`."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    # From a scratch directory: a repository root there would shadow PYTHONPATH's pxn.
    subprocess.run(command, check=True, capture_output=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def cpu_times(command: list[str], repeats: int) -> list[float]:
    """The CPU seconds of each of `repeats` runs of `command`."""
    return [run(command)[0] for _ in range(repeats)]


def least_cpu(command: list[str], repeats: int) -> float:
    """The least CPU time over repeats: what the command needs, with the least interference."""
    return min(cpu_times(command, repeats))


def simulate_command(scenario: str, reps: int) -> list[str]:
    return [str(PXN), "simulate", scenario, "--shape", "2x2", "--jobs", "1", "--reps", str(reps)]


def start_up(scenario: str, repeats: int) -> None:
    imports = "import pxn.app.cli, pxn.sim.predict, pxn.api.prediction_report"
    loading = f"{imports}; from pxn.sim.presets import load_scenario; load_scenario({scenario!r})"
    for what, command in (
        ("pxn --help", [str(PXN), "--help"]),
        ("imports for a prediction", [sys.executable, "-c", imports]),
        ("imports + loading the scenario", [sys.executable, "-c", loading]),
    ):
        print(f"  {what:<34} {least_cpu(command, repeats):6.2f} s CPU")


def through_cli(scenario: str, low: int, high: int, repeats: int) -> None:
    runs = {reps: cpu_times(simulate_command(scenario, reps), repeats) for reps in (low, high)}
    # The least CPU of each: the command's cost with the least interference. A VM's CPU
    # time itself moves by tens of percent from run to run; the median shows how much.
    cpu = {reps: min(times) for reps, times in runs.items()}
    middle = {reps: statistics.median(times) for reps, times in runs.items()}
    sustained = (high - low) / (cpu[high] - cpu[low])
    print(f"  pxn simulate --reps {low}: {cpu[low]:.2f} s CPU; --reps {high}: {cpu[high]:.2f} s")
    print(f"  sustained: {sustained:6.1f} replicates of 2x2 per CPU second")
    if repeats > 1:
        from_medians = (high - low) / (middle[high] - middle[low])
        print(
            f"  of {repeats} runs each, medians {middle[low]:.2f} and {middle[high]:.2f} s CPU: "
            f"{from_medians:.1f} replicates per CPU second"
        )
    for reps in (low, high):
        print(f"  end to end at --reps {reps}: {reps / cpu[reps]:6.1f} replicates per CPU second")


def core_loop(scenario: Scenario, seconds: float) -> None:
    rates = {}
    for shape in SHAPES:
        simulate_once(scenario, shape, 0)  # warm caches (scipy distribution objects)
        done, start = 0, time.process_time()
        while time.process_time() - start < seconds / 2 or done < 3:
            simulate_once(scenario, shape, done)
            done += 1
        rates[shape] = done / (time.process_time() - start)
    each = ", ".join(f"{shape.label} {rate:.1f}" for shape, rate in rates.items())
    print(f"  core loop, this process: replicates per CPU second: {each}")


def sweep(repeats: int) -> None:
    command = [str(PXN), "sweep", "livebench-math", "--reps", "200", "--jobs", "2"]
    runs = [run([*command, "--format", "csv"]) for _ in range(repeats)]
    walls, cpus = [w for _, w in runs], [c for c, _ in runs]
    print(
        f"pxn sweep livebench-math --reps 200 --jobs 2 (nine shapes, {repeats} runs): "
        f"wall median {statistics.median(walls):.2f} s, min {min(walls):.2f} s; "
        f"CPU median {statistics.median(cpus):.2f} s"
    )


def profile(scenario: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cli.prof"
        command = [sys.executable, "-m", "cProfile", "-o", str(out), str(PXN)]
        subprocess.run([*command, *simulate_command(scenario, 200)[1:]], check=True,
                       capture_output=True, cwd=tmp)  # fmt: skip
        stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    total = max(cumulative for _, _, _, cumulative, _ in stats.values())
    print(f"  profiled run: {total:.2f} s under cProfile (which slows it; read the shares)")
    for name, what in PARTS.items():
        # A name may be several functions (load, print): the largest is the one meant.
        cumulative = max(
            (entry[3] for (_, _, function), entry in stats.items() if function == name),
            default=None,
        )
        share = "absent" if cumulative is None else f"{cumulative / total:6.1%}"
        print(f"    {what:<52} {share}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer replicates and repeats")
    parser.add_argument("--profile", action="store_true", help="also profile one CLI run")
    parser.add_argument(
        "--repeats", type=int, help="runs of each command, the least CPU kept (default 2; 1 quick)"
    )
    args = parser.parse_args()
    low, high, repeats = (250, 750, 1) if args.quick else (300, 1300, 2)
    repeats = args.repeats or repeats

    print(machine())
    print(f"before: {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        every = every_effect(Path(tmp) / "every-effect.toml")
        unlimited = without_limits(every, Path(tmp) / "every-effect-no-limits.toml")
        scenarios = {
            "livebench-math": "livebench-math",
            "every effect": str(every),
            "every effect but the provider limits": str(unlimited),
        }
        for name, scenario in scenarios.items():
            print(f"{name}:")
            start_up(scenario, repeats + 1)
            through_cli(scenario, low, high, repeats)
            core_loop(load_scenario(scenario), 2.0 if args.quick else 6.0)
            if args.profile:
                profile(scenario)
    sweep(1 if args.quick else 3)
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
