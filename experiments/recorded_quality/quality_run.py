"""One real gepa 0.1.4 run on the task of known quality, recorded with the one line: the
script a user writes, with the synthetic quality task in place of their program and LM.

    .venv/bin/python experiments/recorded_quality/quality_run.py OUT --shape 2x2 --seed 0

The task is `pxn conformance --task quality`'s (TRUTH: its default workload, every
latency times 0.01), used as a library: pxn.checks.synthetic_quality's SyntheticSearch
holds the run's candidates and examples and scores each evaluation by the quality model.
Around it, what a user writes:

- an adapter whose `batch_evaluate` runs every example of a gepa call on its own pool of
  W threads, each sleeping a rollout's latency and scoring the example (the seed's
  validation comes through `evaluate`, on the same pool); it times nothing;
- a reflection LM that is a plain callable (gepa asks it one prompt at a time): it sleeps
  a reflection's latency and writes the child of the prompt's parent (the first candidate
  gepa's default template names) that the search draws;
- `gepa.optimize` with `PxNSampling`, wrapped in `with recording(out, workers=W) as rec`.

Each run draws its own examples, qualities and latencies from a stream keyed by its shape
and seed (gepa's own seed is the run's seed). Prints the run's totals as rec.result holds
them, with the true expected score of the candidate gepa chose.

`--same-examples`, the study's second arm: every run on one set of examples, the
difficulties and the seed's residuals drawn once from a stream keyed by the study's seed
alone, and evaluations without noise (eval_noise 0, as a temperature-0 LM with a fixed
prompt scores), so every run measures the seed's validation alike; the children's
qualities and the latencies stay the run's own.

    .venv/bin/python experiments/recorded_quality/quality_run.py OUT --same-examples
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import gepa
import numpy as np
from gepa.core.adapter import EvaluationBatch
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.checks.conformance import DEFAULT_QUALITY_SCENARIO, at_time_scale
from pxn.checks.synthetic import COMPONENT, LatencyDraws
from pxn.checks.synthetic_quality import SEED, Example, SyntheticSearch
from pxn.distribution import Distribution
from pxn.quality import Quality
from pxn.runner.record import recording
from pxn.scenario import Scenario
from pxn.shape import Shape

TRUTH = at_time_scale(DEFAULT_QUALITY_SCENARIO, 0.01)  # rollouts ~20 ms, reflections ~80 ms
STUDY_SEED = 26  # issue #26: every run's streams are keyed within it


@dataclass(frozen=True)
class Arm:
    """One arm of the study: its outputs' folder (within the study's), the truth its runs
    are drawn from, and whether they all share one set of examples."""

    folder: str
    truth: Scenario
    same_examples: bool


OWN_EXAMPLES = Arm(".", TRUTH, same_examples=False)
SAME_EXAMPLES = Arm(
    "same-examples",
    TRUTH.replace(quality=dataclasses.replace(TRUTH.quality, eval_noise=0.0)),
    same_examples=True,
)


def arm(same_examples: bool) -> Arm:
    return SAME_EXAMPLES if same_examples else OWN_EXAMPLES


class Latencies:
    """Draws of one latency distribution, for any thread."""

    def __init__(self, distribution: Distribution, rng: np.random.Generator):
        self.draws = LatencyDraws(distribution, rng)
        self.lock = threading.Lock()

    def sleep(self) -> None:
        with self.lock:
            seconds = self.draws.next()
        time.sleep(seconds)


class PoolAdapter:
    """A user's adapter: each call's examples on a pool of W threads, nothing timed."""

    propose_new_texts = None

    def __init__(self, search: SyntheticSearch, workers: int, latencies: Latencies):
        self.search = search
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.latencies = latencies

    def _score(self, candidate: dict[str, str], example: Example) -> float:
        self.latencies.sleep()
        return self.search.score(candidate[COMPONENT], example)

    def evaluate(self, batch, candidate, capture_traces=False):
        return self.batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(self, items, **kwargs):
        jobs = [(candidate, example) for candidate, batch in items for example in batch]
        scores = list(self.pool.map(lambda job: self._score(*job), jobs))
        results, at = [], 0
        for _, batch in items:
            chunk, at = scores[at : at + len(batch)], at + len(batch)
            trajectories = [{"example": e, "score": s} for e, s in zip(batch, chunk, strict=True)]
            results.append(
                EvaluationBatch(outputs=list(batch), scores=chunk, trajectories=trajectories)
            )
        return results

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        records = [
            {"Inputs": str(t["example"]), "Feedback": f"scored {t['score']:.0f}"}
            for t in eval_batch.trajectories or []
        ]
        return {name: records for name in components_to_update}


class ReflectionLM:
    """A plain callable: sleeps a reflection's latency and returns the search's new child."""

    def __init__(self, search: SyntheticSearch, latencies: Latencies):
        self.search = search
        self.latencies = latencies

    def __call__(self, prompt) -> str:
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        self.latencies.sleep()
        return f"```\n{self.search.propose(text)}\n```"


def share_examples(search: SyntheticSearch, quality: Quality) -> None:
    """The study's one set of examples in place of the run's own: the difficulties and the
    seed's residuals of a search keyed by the study's seed alone."""
    sizes = {split: len(d) for split, d in search.difficulty.items()}
    shared = SyntheticSearch(quality, sizes, np.random.SeedSequence(STUDY_SEED))
    search.difficulty = shared.difficulty
    search.candidates[SEED] = shared.candidates[SEED]


def run(out: Path, shape: Shape, seed: int, study: Arm = OWN_EXAMPLES) -> dict:
    truth = study.truth
    workers = truth.workers
    streams = np.random.SeedSequence(STUDY_SEED, spawn_key=(shape.p, shape.n, seed)).spawn(3)
    sizes = {"train": truth.trainset_size, "val": truth.valset_size}
    search = SyntheticSearch(truth.quality, sizes, streams[0])
    if study.same_examples:
        share_examples(search, truth.quality)
    adapter = PoolAdapter(
        search, workers, Latencies(truth.rollout, np.random.default_rng(streams[1]))
    )
    reflection_lm = ReflectionLM(
        search, Latencies(truth.reflection, np.random.default_rng(streams[2]))
    )
    with recording(out, workers=workers) as rec:
        result = gepa.optimize(
            **rec.wrap(
                seed_candidate={COMPONENT: search.seed_text},
                trainset=[Example("train", i) for i in range(truth.trainset_size)],
                valset=[Example("val", i) for i in range(truth.valset_size)],
                adapter=adapter,
                reflection_lm=reflection_lm,
                reflection_minibatch_size=truth.minibatch,
                max_metric_calls=truth.budget,
                sampling_strategy=PxNSampling(shape.p, shape.n),
                seed=seed,
                display_progress_bar=False,
            )
        )
    adapter.pool.shutdown()
    chosen = search.expected_score(result.best_candidate[COMPONENT])
    return dataclasses.asdict(rec.result) | {"test_score": chosen}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", default="1x1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--same-examples", action="store_true", help="the second arm")
    args = parser.parse_args()
    print(json.dumps(run(args.out, Shape.parse(args.shape), args.seed, arm(args.same_examples))))
