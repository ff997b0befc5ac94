"""The tiny DSPy program the dspy.GEPA recording tests compile, on project-made data.

A dspy.Predict labels a sentence's topic (runner/topic_data.py's rows), scored 1 when
the label is right, against SmolLM2 on the local llama.cpp pool.

Run as a script it is a user's script with the one line added: it compiles the program,
recorded into OUT, and prints the run's totals as JSON.

    python dspy_program.py OUT TASK_API_BASE REFLECTION_API_BASE [--resume]
        [--ctrl-c-after N] [--budget B] [--train N] [--shape PxN] [--threads T]

--ctrl-c-after N: the metric's Nth call sends this process SIGINT, as Ctrl-C in its
terminal would, at a known point of the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import signal

import dspy
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.runner.dspy_recording import recorded
from pxn.runner.lm_pool import LOCAL_KEY
from pxn.runner.topic_data import ROWS, SPLITS
from pxn.shape import Shape


class Topic(dspy.Signature):
    """Label the sentence's topic."""

    sentence: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="one of sports, food, weather, music")


def examples(split: str, count: int) -> list[dspy.Example]:
    lo, _ = SPLITS[split]
    return [
        dspy.Example(sentence=sentence, topic=topic).with_inputs("sentence")
        for sentence, topic, _ in ROWS[lo : lo + count]
    ]


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    said = str(pred.get("topic") or "").strip().lower()
    right = gold.topic in said
    feedback = "Correct." if right else f"The topic is {gold.topic}, not {said!r}."
    return dspy.Prediction(score=float(right), feedback=feedback)


def local_lm(api_base: str, max_tokens: int) -> dspy.LM:
    # llama.cpp's server reads `max_tokens` only, and DSPy sends OpenAI's
    # `max_completion_tokens`: without the extra body the replies run unbounded.
    return dspy.LM(
        "openai/smollm2",
        api_base=api_base,
        api_key=LOCAL_KEY,
        cache=False,
        temperature=1.0,
        max_tokens=max_tokens,
        extra_body={"max_tokens": max_tokens},
    )


def optimizer(reflection_lm: dspy.LM, **kw) -> dspy.GEPA:
    """dspy.GEPA as a user creates it: DSPy's defaults (use_merge=True among them) but for the
    budget, the threads and the stats the tests read."""
    base = dict(
        metric=metric,
        max_metric_calls=30,
        reflection_lm=reflection_lm,
        num_threads=2,
        track_stats=True,
    )
    return dspy.GEPA(**{**base, **kw})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("task_api_base")
    parser.add_argument("reflection_api_base")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--ctrl-c-after", type=int)
    parser.add_argument("--budget", type=int, default=30, help="max_metric_calls")
    parser.add_argument("--train", type=int, default=6, help="training examples")
    parser.add_argument("--shape", default="single", help="P x N proposals an iteration, e.g. 2x2")
    parser.add_argument("--threads", type=int, default=2, help="dspy.GEPA's num_threads")
    args = parser.parse_args()
    calls = itertools.count(1)

    def metric_then_ctrl_c(gold, pred, trace=None, pred_name=None, pred_trace=None):
        if next(calls) == args.ctrl_c_after:
            os.kill(os.getpid(), signal.SIGINT)
        return metric(gold, pred, trace, pred_name, pred_trace)

    dspy.configure(lm=local_lm(args.task_api_base, 16))
    shape = Shape.parse(args.shape)
    batched = {} if shape.k == 1 else {"sampling_strategy": PxNSampling(shape.p, shape.n)}
    opt = recorded(
        optimizer(
            local_lm(args.reflection_api_base, 150),
            metric=metric_then_ctrl_c,
            max_metric_calls=args.budget,
            num_threads=args.threads,
            gepa_kwargs=batched,
        ),
        args.out,
        resume=args.resume,
        max_reflection_failures=100,
    )
    opt.compile(
        dspy.Predict(Topic), trainset=examples("train", args.train), valset=examples("val", 4)
    )
    print(json.dumps(dataclasses.asdict(opt.result)))


if __name__ == "__main__":
    main()
