"""A task gepa merges on: plain gepa parts (sleep-free, deterministic, no pxn code inside),
and the same task as the runner's Task with synthetic models of known latency.

record_helpers.py's words task with two components: a candidate scores 1 on
an example (a word) when either component holds it. The reflection LM
appends to a component the next vocabulary word of its parity (even words
"words", odd words "more"), so a child improving one component and a child
improving the other are best on different examples: both stay on gepa's
front, and gepa merges them. A candidate holding both w4 and w5 clashes and
scores 0 everywhere: a merge that brings them together fails its subsample
and gepa rejects it.
"""

from __future__ import annotations

import re
from typing import Any

from gepa.core.adapter import EvaluationBatch
from record_helpers import VOCAB, SerialAdapter

from pxn.checks.synthetic import SyntheticReflectionModel
from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.tasks import Feedback, Task

SEED = {"words": "w0", "more": "w1"}
TRAIN = [VOCAB[i % 12] for i in range(12)]
VAL = [VOCAB[i] for i in range(8)]
CLASH = {"w4", "w5"}


def score(candidate: dict[str, str], example: str) -> float:
    words = {w for text in candidate.values() for w in text.split()}
    if words >= CLASH:
        return 0.0
    return 1.0 if example in words else 0.0


class MergingAdapter(SerialAdapter):
    """evaluate only: gepa calls it pair after pair, the merge's subsample included."""

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False):
        self.calls += 1
        scores = [score(candidate, ex) for ex in batch]
        trajectories = [{"example": ex, "score": s} for ex, s in zip(batch, scores, strict=True)]
        return EvaluationBatch(outputs=list(batch), scores=scores, trajectories=trajectories)


def next_alike(prompt: str) -> str:
    """The component's words plus the first vocabulary word of their parity they lack."""
    current = re.search(r"```\n?(.*?)\n?```", prompt, re.S)
    words = current.group(1).split() if current else []
    parity = int(words[0][1:]) % 2 if words else 0
    new = next(w for w in VOCAB if int(w[1:]) % 2 == parity and w not in words)
    return "```\n" + " ".join([*words, new]) + "\n```"


class AlikeLM:
    """A plain callable reflection LM appending words of the component's parity."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompt: Any) -> str:
        self.calls += 1
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
        return next_alike(text)


# -- the same task on the runner's engine, its models sleeping a scenario's latencies ----


def merging_task() -> Task:
    """The task as a runner Task: the program calls the task model once (a synthetic one
    sleeps a rollout's latency), and the words decide the score."""

    def program(candidate: dict[str, str], example: str, lm: Any) -> str:
        lm([{"role": "user", "content": f"Answer {example}."}])
        return str(score(candidate, example))

    def metric(example: str, output: str) -> Feedback:
        return Feedback(float(output), "right" if float(output) else f"{example} is missing")

    return Task(
        name="merging",
        description="two components of words; gepa merges children of different ones",
        train=TRAIN,
        val=VAL,
        seed_candidate=dict(SEED),
        program=program,
        metric=metric,
        reflection_prompt_template="```\n<curr_param>\n```\n<side_info>",
    )


class AlikeReflectionModel(SyntheticReflectionModel):
    """The synthetic reflection model (it sleeps a reflection's latency) writing next_alike's
    text instead of a level."""

    def reply(self, messages: list[dict[str, Any]], site: Any) -> str:
        return next_alike(prompt_text(messages))
