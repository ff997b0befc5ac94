"""One real gepa 0.1.4 run of a plain thread-pool adapter on the local LM pool, recorded with
the one line: the script a user writes, timing nothing itself.

    .venv/bin/python experiments/untimed/lm_run.py OUT --shape 2x2 --seed 0 --budget 100

Starts the local pool (2 llama.cpp servers, SmolLM2-135M) and reaches it as
a user with a pool of their own would, through a litellm Router routing each
call to the least busy server. The task is pxn's `topics` task (a hint
GEPA optimizes, inside a fixed prompt that labels a sentence's topic), used
as a library: its examples, program, metric and reflection template. The
adapter runs each gepa call's examples on a pool of W = 2 threads (one per
server) and reports nothing to the recorder; the reflection LM is a plain
callable on the same Router (gepa calls it one prompt at a time). Prints the
run's totals as JSON. Run it with LITELLM_LOCAL_MODEL_COST_MAP=True (run.sh
does), or importing litellm tries to download its price list.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import litellm
from gepa.core.adapter import EvaluationBatch
from one_line import record

from pxn.runner.lm_pool import MODEL_ALIAS, LMPool
from pxn.runner.topic_task import make_topic_task
from pxn.shape import Shape

WORKERS = 2  # threads, one per server
TASK = make_topic_task()


class ThreadPoolAdapter:
    """A user's adapter: each call's examples on a pool of W threads, each one LM call."""

    propose_new_texts = None

    def __init__(self, router: litellm.Router, workers: int):
        self.router = router
        self.pool = ThreadPoolExecutor(max_workers=workers)

    def lm(self, messages, **kwargs) -> str:
        reply = self.router.completion(
            model=MODEL_ALIAS, messages=messages, **(TASK.lm_kwargs | kwargs)
        )
        return reply.choices[0].message.content or ""

    def _one(self, candidate, example):
        output = TASK.program(candidate, example, self.lm)
        feedback = TASK.metric(example, output)
        return output, feedback

    def evaluate(self, batch, candidate, capture_traces=False):
        return self.batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(self, items, **kwargs):
        jobs = [(candidate, example) for candidate, batch in items for example in batch]
        done = list(self.pool.map(lambda job: self._one(*job), jobs))
        out, at = [], 0
        for _, batch in items:
            chunk, at = done[at : at + len(batch)], at + len(batch)
            records = [
                TASK.record(example, output, feedback)
                for example, (output, feedback) in zip(batch, chunk, strict=True)
            ]
            out.append(
                EvaluationBatch(
                    outputs=[output for output, _ in chunk],
                    scores=[feedback.score for _, feedback in chunk],
                    trajectories=records,
                )
            )
        return out

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        return {name: list(eval_batch.trajectories or []) for name in components_to_update}


def run(out: Path, shape: Shape, seed: int, budget: int) -> dict:
    with LMPool(2) as pool:
        router = litellm.Router(model_list=pool.model_list(), routing_strategy="least-busy")

        def reflection_lm(prompt: str) -> str:
            reply = router.completion(
                model=MODEL_ALIAS,
                messages=[{"role": "user", "content": prompt}],
                **TASK.reflection_lm_kwargs,
            )
            return reply.choices[0].message.content or ""

        return record(
            out,
            WORKERS,
            shape,
            seed,
            budget,
            lambda rec: ThreadPoolAdapter(router, WORKERS),
            seed_candidate=TASK.seed_candidate,
            trainset=list(TASK.train),
            valset=list(TASK.val),
            reflection_lm=reflection_lm,
            reflection_prompt_template=TASK.reflection_prompt_template,
            reflection_minibatch_size=TASK.minibatch,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", default="1x1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(run(args.out, Shape.parse(args.shape), args.seed, args.budget)))
