"""Plain parts for recording optimize_anything and gepa's default adapter: sleep-free,
deterministic, no pxn code inside (record_helpers.py's word task, in these APIs' forms).

optimize_anything: the evaluator scores a candidate 1 on an example (a word) when its
component "words" holds it; a single-task evaluator scores the count of target words a
text holds, on its own scale. The refiner LM adds the next unused word to the candidate's
JSON. gepa.optimize's default adapter: the task model "answers" the word when the system
prompt (the candidate) holds it, and gepa's ContainsAnswerEvaluator checks the answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from record_helpers import TRAIN, VAL, score, with_next_word

TARGET = ["w0", "w1", "w2", "w3", "w4"]


def evaluate(candidate: dict[str, str], example: str) -> tuple[float, dict[str, str]]:
    got = score(candidate, example)
    return got, {"Input": example, "Feedback": "ok" if got else f"missing {example}"}


def evaluate_one(candidate: str) -> tuple[float, dict[str, str]]:
    """A single-task evaluator: the target words the text holds (a score of 0 to 5)."""
    words = candidate.split()
    return float(sum(w in words for w in TARGET)), {"Missing": " ".join(set(TARGET) - set(words))}


def evaluate_batch(pairs: list[tuple[dict[str, str], str]]) -> list[tuple[float, dict]]:
    """A batch_evaluator: every pair of an adapter call in one call."""
    return [evaluate(candidate, example) for candidate, example in pairs]


class RefinerLM:
    """Refines the candidate's JSON by one more word."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        found = re.search(r"```json\n(.*?)\n```", prompt, re.S)
        params = json.loads(found.group(1)) if found else {}
        return json.dumps({k: with_next_word(v.split()) for k, v in params.items()})


class Reached:
    """A user's stopper: stops once gepa has run `iterations` iterations."""

    def __init__(self, iterations: int):
        self.iterations = iterations

    def __call__(self, state: Any) -> bool:
        return state.i + 1 >= self.iterations


class StopFileAt:
    """A user's callback that asks gepa to stop (its run_dir's gepa.stop) after an iteration."""

    def __init__(self, run_dir: str, iteration: int):
        self.run_dir = run_dir
        self.iteration = iteration

    def on_iteration_end(self, event: dict[str, Any]) -> None:
        if event["iteration"] == self.iteration:
            with open(f"{self.run_dir}/gepa.stop", "w") as f:
                f.write("stop")


def default_data(words: list[str]) -> list[dict[str, Any]]:
    """gepa's DefaultDataInst for each word: the answer is the word."""
    return [{"input": w, "additional_context": {}, "answer": w} for w in words]


DEFAULT_TRAIN, DEFAULT_VAL = default_data(TRAIN), default_data(VAL)


class TaskModel:
    """A task model for gepa's DefaultAdapter: answers the word when the system prompt holds
    it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.calls += 1
        system, user = messages[0]["content"], messages[1]["content"]
        return f"the answer is {user}" if user in system.split() else "no idea"
