"""What does recording cost a gepa run? Per-rollout overhead of pxn.runner.record.

    .venv/bin/python experiments/bench/record_overhead.py [--reps 3]

The same real gepa 0.1.4 run (2x2, seed 0, W = 4 threads, a reflection LM
that is a plain function) twice per repetition, unrecorded and recorded,
alternating, with two adapters from tests/record_helpers.py's task:

- a rollout that sleeps 100 ms (the target: overhead under 1% of it), each
  timed where it runs with `rec.rollout(i)`, budget 200 metric calls;
- a rollout that does no work, so the recording's own cost stands alone,
  budget 3000 metric calls.

Overhead per rollout = (recorded - unrecorded) / metric calls, in wall time
and in this process's CPU time, the median over repetitions. Prints the
machine's load before and after: other processes sharing the cores move every
figure here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the plain task the recorder's tests use

import gepa  # noqa: E402
from gepa.strategies.proposal_sampling import PxNSampling  # noqa: E402
from record_helpers import SEED, TRAIN, VAL, CallableLM, ThreadedAdapter  # noqa: E402

from pxn.runner.record import recording  # noqa: E402

WORKERS = 4


class SleepingAdapter(ThreadedAdapter):
    """Each rollout sleeps `seconds` (an LM call's wait) before scoring."""

    def __init__(self, seconds: float, recording=None):
        super().__init__(WORKERS, recording=recording)
        self.seconds = seconds

    def _run(self, candidate, example):
        if self.seconds:
            time.sleep(self.seconds)
        return super()._run(candidate, example)


def arguments(adapter, budget: int, run_dir: Path) -> dict:
    return dict(
        seed_candidate=SEED,
        trainset=TRAIN,
        valset=VAL,
        adapter=adapter,
        reflection_lm=CallableLM(),
        max_metric_calls=budget,
        sampling_strategy=PxNSampling(2, 2),
        run_dir=str(run_dir),
        logger=Quiet(),
        display_progress_bar=False,
        seed=0,
    )


class Quiet:
    def log(self, message: str) -> None:
        pass


def one_run(seconds: float, budget: int, recorded: bool, scratch: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, metric calls) of one gepa.optimize."""
    out = scratch / ("rec" if recorded else "plain")
    shutil.rmtree(out, ignore_errors=True)
    if not recorded:
        adapter = SleepingAdapter(seconds)
        wall, cpu = time.perf_counter(), time.process_time()
        result = gepa.optimize(**arguments(adapter, budget, out / "gepa"))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return wall, cpu, result.total_metric_calls
    with recording(out, workers=WORKERS) as rec:
        kwargs = rec.wrap(**arguments(SleepingAdapter(seconds, rec), budget, out / "gepa"))
        wall, cpu = time.perf_counter(), time.process_time()
        result = gepa.optimize(**kwargs)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, result.total_metric_calls


def measure(seconds: float, budget: int, reps: int, scratch: Path) -> None:
    walls, cpus = [], []
    for _ in range(reps):
        plain, plain_cpu, calls = one_run(seconds, budget, False, scratch)
        recorded, recorded_cpu, calls_rec = one_run(seconds, budget, True, scratch)
        assert calls == calls_rec, "the recorded run made other metric calls"
        walls.append((recorded - plain) / calls)
        cpus.append((recorded_cpu - plain_cpu) / calls)
        print(
            f"  rollout {seconds * 1000:.0f} ms: {calls} metric calls, wall "
            f"{plain:.3f} -> {recorded:.3f} s ({walls[-1] * 1000:+.3f} ms per rollout), "
            f"CPU {cpus[-1] * 1000:+.3f} ms per rollout"
        )
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    share = f" = {100 * wall / seconds:+.2f}% of the rollout" if seconds else ""
    print(f"median overhead: wall {wall * 1000:+.3f} ms per rollout{share}; ", end="")
    print(f"CPU {cpu * 1000:+.3f} ms per rollout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        print(f"100 ms rollouts, W = {WORKERS}, 2x2, budget 200:")
        measure(0.1, 200, args.reps, scratch)
        print(f"empty rollouts, W = {WORKERS}, 2x2, budget 3000:")
        measure(0.0, 3000, args.reps, scratch)
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
