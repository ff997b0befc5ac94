"""A synthetic task of known quality for the real gepa engine (`pxn conformance --task quality`).

The scores follow the quality model (pxn.quality) exactly. Candidates are
texts `[[candidate LABEL]]` in a registry: the seed is candidate 0, and a
reflection writes a child of the first candidate its prompt names (gepa's
template puts the parent first), drawn as the model says.

Every draw comes from a Generator keyed within the run's seed by what it is
for, so scores do not hang on the order the W rollout and C reflection
threads run in: the examples and the seed on one key; a child on its
prompt's digest and how often that prompt was seen (gepa repeats one only for
two alike tasks); an evaluation's noise on its candidate, example and how
often that pair was evaluated.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pxn.checks.synthetic import (
    COMPONENT,
    PROMPT,
    SearchOutcome,
    SleepingModel,
    SyntheticWork,
    record,
)
from pxn.errors import PxnError
from pxn.files import write_text_atomically
from pxn.quality import Quality
from pxn.runner.lm import CallSite
from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.run import RunResult
from pxn.runner.tasks import Feedback, LMCall, Task
from pxn.scenario import Scenario

CANDIDATE = re.compile(r"\[\[candidate ([0-9a-f-]+)\]\]")
SEED = "0"
TRUTH = "search.json"  # every candidate's quality, beside the run's trace
SPLITS = ("train", "val")
# What a draw is for: the first element of its key.
EXAMPLES, CHILD, NOISE = 0, 1, 2


def candidate_text(label: str) -> str:
    return f"[[candidate {label}]]"


def label_of(text: str) -> str:
    """The first candidate named in `text`."""
    found = CANDIDATE.search(text)
    if found is None:
        raise ValueError(f"no [[candidate LABEL]] in {text[:80]!r}")
    return found.group(1)


def digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Example:
    """One example of the synthetic task, as gepa hands it to the program."""

    split: str  # train | val
    index: int

    def __str__(self) -> str:
        return f"{self.split} example {self.index}"


@dataclass(frozen=True)
class Candidate:
    label: str
    parent: str | None
    quality: float  # theta
    residuals: dict[str, np.ndarray]  # split -> z on each of its examples


class SyntheticSearch:
    """One run's candidates and examples under the quality model. Thread-safe."""

    def __init__(self, quality: Quality, sizes: Mapping[str, int], seed: np.random.SeedSequence):
        """`sizes`: the examples of each split (train, val); `seed`: the run's search stream."""
        self.model = quality
        self.seed = seed
        self.score_of = quality.scorer()
        self._lock = threading.Lock()
        rng = self.stream(EXAMPLES)
        self.difficulty = {s: rng.normal(0.0, quality.difficulty_sd, sizes[s]) for s in SPLITS}
        residuals = {s: rng.standard_normal(sizes[s]) for s in SPLITS}
        self.candidates = {SEED: Candidate(SEED, None, quality.seed_quality, residuals)}
        self._prompts: Counter[int] = Counter()  # prompt digest -> children written from it
        self._evaluations: Counter[tuple[str, Example]] = Counter()

    def stream(self, *key: int) -> np.random.Generator:
        """The Generator of the draws keyed `key` within this run's seed."""
        seq = np.random.SeedSequence(self.seed.entropy, spawn_key=(*self.seed.spawn_key, *key))
        return np.random.default_rng(seq)

    @property
    def seed_text(self) -> str:
        return candidate_text(SEED)

    def propose(self, prompt: str) -> str:
        """The text of a new child of the prompt's parent, its quality and residuals drawn."""
        parent = self.candidates[label_of(prompt)]
        key = digest(prompt)
        with self._lock:
            seen = self._prompts[key]
            self._prompts[key] += 1
        model = self.model
        rng = self.stream(CHILD, key, seen)
        theta = parent.quality
        theta += model.reach(theta) * (model.change_mean + model.change_sd * rng.standard_normal())
        residuals = {
            s: model.inherit * z + model.fresh_share * rng.standard_normal(len(z))
            for s, z in parent.residuals.items()
        }
        label = f"{key:016x}-{seen}"
        with self._lock:
            self.candidates[label] = Candidate(label, parent.label, theta, residuals)
        return candidate_text(label)

    def score(self, text: str, example: Example) -> float:
        """One evaluation of the candidate of `text` on `example`."""
        candidate = self.candidates[label_of(text)]
        split, i = example.split, example.index
        latent = candidate.quality - self.difficulty[split][i] + candidate.residuals[split][i]
        if self.model.eval_noise:
            with self._lock:
                seen = self._evaluations[candidate.label, example]
                self._evaluations[candidate.label, example] += 1
            key = (NOISE, digest(candidate.label), SPLITS.index(split), i, seen)
            latent += self.model.eval_noise * self.stream(*key).standard_normal()
        return self.score_of(float(latent))

    def expected_score(self, text: str) -> float:
        """The candidate's expected score on a fresh example (its test score)."""
        return self.model.expected_score(self.candidates[label_of(text)].quality)

    def truth(self) -> dict[str, Any]:
        """Every candidate's quality and expected score, for the run's directory."""
        return {
            "candidates": [
                {
                    "label": c.label,
                    "parent": c.parent,
                    "quality": c.quality,
                    "expected_score": self.model.expected_score(c.quality),
                }
                for c in self.candidates.values()
            ]
        }


def quality_task(scenario: Scenario, search: SyntheticSearch) -> Task:
    """A task of the scenario's sizes whose scores are the search's (see the module's doc)."""

    def program(candidate: dict[str, str], example: Example, lm: LMCall) -> str:
        lm([{"role": "user", "content": f"Answer {example}."}])
        return repr(search.score(candidate[COMPONENT], example))  # repr: the float to the bit

    def metric(example: Example, output: str) -> Feedback:
        return Feedback(float(output), f"scored {output}")

    return Task(
        name="synthetic-quality",
        description="scores follow the quality model; models sleep the scenario's latencies",
        train=[Example("train", i) for i in range(scenario.trainset_size)],
        val=[Example("val", i) for i in range(scenario.valset_size)],
        seed_candidate={COMPONENT: search.seed_text},
        program=program,
        metric=metric,
        record=record,
        reflection_prompt_template=PROMPT,
        minibatch=scenario.minibatch,
    )


class ProposingModel(SleepingModel):
    """The reflection LM: sleeps a reflection's latency and writes a new child of the
    prompt's parent."""

    role = "reflection"

    def __init__(
        self,
        scenario: Scenario,
        rng: np.random.Generator,
        conditions: float,
        search: SyntheticSearch,
    ):
        super().__init__(scenario, rng, conditions)
        self.search = search

    def reply(self, messages: list[dict[str, Any]], site: CallSite) -> str:
        return f"```\n{self.search.propose(prompt_text(messages))}\n```"


def quality_work(
    scenario: Scenario, rng: np.random.Generator, conditions: float, seed: np.random.SeedSequence
) -> SyntheticWork:
    """The synthetic search of a scenario with a [quality] table: the task and its proposing
    reflection model share one search."""
    if scenario.quality is None:
        raise PxnError("the quality task needs a scenario with a [quality] table: run one of "
                       "[acceptance] rates on the levels task", subject="task")  # fmt: skip
    sizes = {"train": scenario.trainset_size, "val": scenario.valset_size}
    search = SyntheticSearch(scenario.quality, sizes, seed)
    reflection = ProposingModel(scenario, rng, conditions, search)

    def outcome(result: RunResult) -> SearchOutcome:
        """The chosen candidate's expected score; every candidate's truth goes to the run's
        search.json."""
        write_text_atomically(result.out / TRUTH, json.dumps(search.truth(), indent=1) + "\n")
        best = result.result["best_candidate"][COMPONENT]
        return SearchOutcome(test_score=search.expected_score(best))

    return SyntheticWork(quality_task(scenario, search), reflection, outcome)
