"""A user's dspy.GEPA compile, recorded with the one line or not: what stress.py interrupts.

    python compile.py OUT TASK_API_BASE REFLECTION_API_BASE [--unrecorded]
        [--budget B] [--shape PxN]

The program, its data, metric and LMs are tests/dspy_program.py's (a dspy.Predict
labelling a sentence's topic, SmolLM2 on the local pool), compiled by dspy.GEPA at
DSPy's defaults (merge on) with num_threads=2; recorded into OUT unless --unrecorded.
What is there for stress.py, not as a user's script has it: a line on stderr just
before compile starts (STARTED, the moment the interrupt is timed from), one once
gepa.optimize returns inside it (GEPA_RETURNED: an interrupt after it met DSPy
building the program, no longer gepa's run) and one once compile returns (RETURNED:
an interrupt after it found the compile done); and SIGUSR1 dumps every thread's stack
to stderr (faulthandler), so a compile that does not stop says where its threads wait.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import dspy
import gepa
from dspy_program import Topic, examples, local_lm, optimizer
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.runner.dspy_recording import recorded
from pxn.shape import Shape

STARTED, RETURNED = "stress: compiling", "stress: compile returned"
GEPA_RETURNED = "stress: gepa returned"


def say_when_gepa_returns() -> None:
    """gepa.optimize, which dspy.GEPA looks up when it compiles (through the recorder, when
    recorded), writes GEPA_RETURNED once it returns."""
    optimize = gepa.optimize

    def optimize_then_say(**kwargs):
        result = optimize(**kwargs)
        print(GEPA_RETURNED, file=sys.stderr, flush=True)
        return result

    gepa.optimize = optimize_then_say


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("task_api_base")
    parser.add_argument("reflection_api_base")
    parser.add_argument("--unrecorded", action="store_true")
    parser.add_argument("--budget", type=int, default=16, help="max_metric_calls")
    parser.add_argument("--shape", default="single", help="P x N proposals an iteration")
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    say_when_gepa_returns()

    dspy.configure(lm=local_lm(args.task_api_base, 16))
    shape = Shape.parse(args.shape)
    batched = {} if shape.k == 1 else {"sampling_strategy": PxNSampling(shape.p, shape.n)}
    opt = optimizer(
        local_lm(args.reflection_api_base, 150), max_metric_calls=args.budget, gepa_kwargs=batched
    )
    if not args.unrecorded:
        opt = recorded(opt, args.out, max_reflection_failures=100)
    print(STARTED, file=sys.stderr, flush=True)
    opt.compile(dspy.Predict(Topic), trainset=examples("train", 6), valset=examples("val", 4))
    print(RETURNED, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
