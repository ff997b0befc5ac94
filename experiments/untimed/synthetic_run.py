"""One real gepa 0.1.4 run of a plain thread-pool adapter on synthetic work, recorded with the
one line: the script a user writes, with work of known latency in place of their LM.

    .venv/bin/python experiments/untimed/synthetic_run.py OUT --shape 2x2 --workers 4 \
        --seed 0 [--timed]

The adapter runs every example of a gepa call on its own pool of W threads
(batch_evaluate; the seed's validation comes through evaluate, on the same
pool). A rollout sleeps a draw of ROLLOUT; without --timed it times nothing
for the recorder (the plain adapter), with --timed each rollout runs inside
`rec.rollout(index)`. The reflection LM is a plain callable (gepa calls it
one prompt at a time) that sleeps a draw of REFLECTION and writes the child
a level up with probability ACCEPTANCE (pxn.checks.synthetic's levels: a
level-L candidate scores L / (L + 1) on every example, so gepa accepts
exactly the children written a level up). Prints the run's totals as JSON.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from gepa.core.adapter import EvaluationBatch
from one_line import record

from pxn.checks.synthetic import PROMPT, candidate_text, level_of, score_of
from pxn.shape import Shape

# The truth, in seconds as slept: a rollout's median 20 ms, a reflection's 60 ms.
ROLLOUT = {"s": 0.5, "scale": 0.02}
REFLECTION = {"s": 0.4, "scale": 0.06}
ACCEPTANCE = 0.3
BUDGET, TRAIN, VAL, MINIBATCH = 150, 24, 8, 3
COMPONENT = "instructions"


class Draws:
    """Lognormal draws from one seeded stream, for any thread."""

    def __init__(self, params: dict[str, float], seed: list[int]):
        self.rng = np.random.default_rng(seed)
        self.params = params
        self.lock = threading.Lock()

    def next(self) -> float:
        with self.lock:
            return float(self.params["scale"] * np.exp(self.params["s"] * self.rng.normal()))


class PoolAdapter:
    """A user's adapter: each call's examples on a pool of W threads."""

    propose_new_texts = None

    def __init__(self, workers: int, draws: Draws, rec=None):
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.draws = draws
        self.rec = rec  # set: each rollout timed where it runs

    def _rollout(self, index: int, candidate: dict[str, str]) -> float:
        if self.rec is None:
            return self._run(candidate)
        with self.rec.rollout(index) as note:
            note.score = self._run(candidate)
        return note.score

    def _run(self, candidate: dict[str, str]) -> float:
        time.sleep(self.draws.next())
        return score_of(level_of(candidate[COMPONENT]))

    def evaluate(self, batch, candidate, capture_traces=False):
        return self.batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(self, items, **kwargs):
        jobs = [candidate for candidate, batch in items for _ in batch]
        scores = list(self.pool.map(self._rollout, range(len(jobs)), jobs))
        out, at = [], 0
        for _, batch in items:
            chunk, at = scores[at : at + len(batch)], at + len(batch)
            records = [{"example": e, "score": s} for e, s in zip(batch, chunk, strict=True)]
            out.append(EvaluationBatch(outputs=list(batch), scores=chunk, trajectories=records))
        return out

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        records = [
            {"Inputs": str(t["example"]), "Feedback": f"scored {t['score']:.4f}"}
            for t in eval_batch.trajectories or []
        ]
        return {name: records for name in components_to_update}


class ReflectionLM:
    """A plain callable: sleeps a reflection's draw, writes the child a level up or not."""

    def __init__(self, draws: Draws, seed: list[int]):
        self.draws = draws
        self.verdicts = np.random.default_rng(seed)
        self.calls = 0

    def __call__(self, prompt) -> str:
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        time.sleep(self.draws.next())
        self.calls += 1
        up = self.verdicts.random() < ACCEPTANCE
        return f"```\n{candidate_text(level_of(text) + up, f'proposal {self.calls}')}\n```"


def run(out: Path, shape: Shape, workers: int, seed: int, timed: bool) -> dict:
    key = [shape.p, shape.n, workers, seed, int(timed)]
    return record(
        out,
        workers,
        shape,
        seed,
        BUDGET,
        lambda rec: PoolAdapter(workers, Draws(ROLLOUT, [1, *key]), rec if timed else None),
        seed_candidate={COMPONENT: candidate_text(0, "seed")},
        trainset=[f"train example {i}" for i in range(TRAIN)],
        valset=[f"val example {i}" for i in range(VAL)],
        reflection_lm=ReflectionLM(Draws(REFLECTION, [2, *key]), [3, *key]),
        reflection_prompt_template=PROMPT,
        reflection_minibatch_size=MINIBATCH,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", default="1x1")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timed", action="store_true")
    args = parser.parse_args()
    totals = run(args.out, Shape.parse(args.shape), args.workers, args.seed, args.timed)
    print(json.dumps(totals))
