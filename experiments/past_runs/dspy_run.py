"""One dspy.GEPA run of the study's `dspy` arm: recorded, its log_dir kept, tracked in MLflow.

    python experiments/past_runs/dspy_run.py OUT TASK_API_BASE REFLECTION_API_BASE \\
        --shape 2x2 --seed 0

tests/dspy_program.py's one-predictor program (a sentence's topic, on the local pool's
SmolLM2), compiled by dspy.GEPA at DSPy's defaults but for the budget, the threads and
`use_mlflow=True` (the store and experiment: --tracking-uri, --experiment, given on to
gepa), wrapped with the recorder's one line.
DSPy's log lines, each with its time, go to stderr, where the study keeps them. Prints
the run's totals as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import dspy
from gepa.strategies.proposal_sampling import PxNSampling

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from dspy_program import Topic, examples, local_lm, optimizer

from pxn.runner.dspy_recording import recorded
from pxn.shape import Shape

BUDGET = 120
TRAIN, VAL = 12, 6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("task_api_base")
    parser.add_argument("reflection_api_base")
    parser.add_argument("--shape", default="single")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tracking-uri")
    parser.add_argument("--experiment")
    args = parser.parse_args()
    dspy.configure(lm=local_lm(args.task_api_base, 16))
    shape = Shape.parse(args.shape)
    batched = {} if shape.k == 1 else {"sampling_strategy": PxNSampling(shape.p, shape.n)}
    # dspy.GEPA passes use_mlflow on; the store and experiment go through gepa_kwargs.
    tracking = {"mlflow_tracking_uri": args.tracking_uri, "mlflow_experiment_name": args.experiment}
    batched |= {k: v for k, v in tracking.items() if v}
    opt = recorded(
        optimizer(
            local_lm(args.reflection_api_base, 150),
            max_metric_calls=BUDGET,
            num_threads=2,
            seed=args.seed,
            use_mlflow=True,
            gepa_kwargs=batched,
        ),
        args.out,
        max_reflection_failures=100,
    )
    opt.compile(dspy.Predict(Topic), trainset=examples("train", TRAIN), valset=examples("val", VAL))
    print(json.dumps(dataclasses.asdict(opt.result), default=str))


if __name__ == "__main__":
    main()
