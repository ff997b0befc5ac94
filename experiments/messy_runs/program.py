"""A user's dspy.GEPA script as first runs look: two predictors, a graded metric, a small
valset, DSPy's defaults, a weak local model, and the README's one recording line.

Two programs, each of two predictors:
- keyword-topic: names the word that gives a sentence's topic away (`keyword`), then
  labels the topic from the sentence and that word; half a point for a keyword among the
  row's clue words, half for the right topic (0, 0.5 or 1);
- guess-check: guesses the topic with a chain of thought, then checks the guess against
  the sentence and gives the final topic; a quarter for a right guess, three quarters for
  a right final topic (0, 0.25, 0.75 or 1).
Each metric's feedback names what was missed. dspy.GEPA runs at its defaults (merge on,
its instruction proposer, whose replies SmolLM2 often cannot fill in) with
`num_threads=2`.

    python program.py OUT TASK_API_BASE REFLECTION_API_BASE --seed S [--shape PxN]
        [--program keyword-topic|guess-check] [--budget B] [--ctrl-c-after N]

Prints the recorded run's totals as JSON on its last line.
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
from pxn.runner.topic_data import ROWS, SPLITS

TRAIN, VAL = 12, 8


class Keyword(dspy.Signature):
    """Name the one word of the sentence that best shows what it is about."""

    sentence: str = dspy.InputField()
    keyword: str = dspy.OutputField()


class Topic(dspy.Signature):
    """Label the sentence's topic."""

    sentence: str = dspy.InputField()
    keyword: str = dspy.InputField(desc="a word that shows the topic")
    topic: str = dspy.OutputField(desc="one of sports, food, weather, music")


class KeywordTopic(dspy.Module):
    def __init__(self):
        super().__init__()
        self.keyword = dspy.Predict(Keyword)
        self.topic = dspy.Predict(Topic)

    def forward(self, sentence: str) -> dspy.Prediction:
        keyword = self.keyword(sentence=sentence).keyword
        topic = self.topic(sentence=sentence, keyword=keyword).topic
        return dspy.Prediction(keyword=keyword, topic=topic)


class Guess(dspy.Signature):
    """Guess the sentence's topic."""

    sentence: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="one of sports, food, weather, music")


class Check(dspy.Signature):
    """Check the guessed topic against the sentence and give the final topic."""

    sentence: str = dspy.InputField()
    guess: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="one of sports, food, weather, music")


class GuessCheck(dspy.Module):
    def __init__(self):
        super().__init__()
        self.guess = dspy.ChainOfThought(Guess)
        self.check = dspy.Predict(Check)

    def forward(self, sentence: str) -> dspy.Prediction:
        guess = self.guess(sentence=sentence).topic
        topic = self.check(sentence=sentence, guess=guess).topic
        return dspy.Prediction(guess=guess, topic=topic)


def examples(split: str, count: int) -> list[dspy.Example]:
    lo, _ = SPLITS[split]
    return [
        dspy.Example(sentence=sentence, topic=topic, clue=clue).with_inputs("sentence")
        for sentence, topic, clue in ROWS[lo : lo + count]
    ]


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    keyword = str(pred.get("keyword") or "").strip().lower()
    topic = str(pred.get("topic") or "").strip().lower()
    clues = [c.strip() for c in gold.clue.split(",")]
    keyword_right = bool(keyword) and any(c in keyword or keyword in c for c in clues)
    topic_right = gold.topic in topic
    said = []
    if not keyword_right:
        said.append(f"The keyword should be one of: {gold.clue}; it was {keyword!r}.")
    if not topic_right:
        said.append(f"The topic is {gold.topic}, not {topic!r}.")
    score = 0.5 * keyword_right + 0.5 * topic_right
    return dspy.Prediction(score=score, feedback=" ".join(said) or "Correct.")


def checked(gold, pred, trace=None, pred_name=None, pred_trace=None):
    guess = str(pred.get("guess") or "").strip().lower()
    topic = str(pred.get("topic") or "").strip().lower()
    guess_right, topic_right = gold.topic in guess, gold.topic in topic
    said = [f"The topic is {gold.topic}."] if not (guess_right and topic_right) else []
    if not guess_right:
        said.append(f"The guess was {guess!r}.")
    if not topic_right:
        said.append(f"The final topic was {topic!r}.")
    score = 0.25 * guess_right + 0.75 * topic_right
    return dspy.Prediction(score=score, feedback=" ".join(said) or "Correct.")


PROGRAMS = {"keyword-topic": (KeywordTopic, metric), "guess-check": (GuessCheck, checked)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("task_api_base")
    parser.add_argument("reflection_api_base")
    parser.add_argument("--seed", type=int, default=0, help="dspy.GEPA's seed")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="keyword-topic")
    parser.add_argument("--shape", default="single", help="P x N, e.g. 2x2")
    parser.add_argument("--budget", type=int, default=80, help="max_metric_calls")
    parser.add_argument("--ctrl-c-after", type=int, help="SIGINT at the metric's Nth call")
    args = parser.parse_args()
    calls = itertools.count(1)
    program, its_metric = PROGRAMS[args.program]

    def scored(gold, pred, trace=None, pred_name=None, pred_trace=None):
        if next(calls) == args.ctrl_c_after:
            os.kill(os.getpid(), signal.SIGINT)
        return its_metric(gold, pred, trace, pred_name, pred_trace)

    def lm(api_base: str, max_tokens: int) -> dspy.LM:
        # llama.cpp reads max_tokens, DSPy sends max_completion_tokens: pass both.
        return dspy.LM("openai/smollm2", api_base=api_base, api_key="local", cache=False,
                       temperature=1.0, max_tokens=max_tokens,
                       extra_body={"max_tokens": max_tokens})  # fmt: skip

    # The chain of thought needs room for its reasoning.
    dspy.configure(lm=lm(args.task_api_base, 24 if args.program == "keyword-topic" else 120))
    p, n = (1, 1) if args.shape == "single" else map(int, args.shape.split("x"))
    gepa_kwargs = {} if p * n == 1 else {"sampling_strategy": PxNSampling(p, n)}
    optimizer = dspy.GEPA(
        metric=scored,
        max_metric_calls=args.budget,
        reflection_lm=lm(args.reflection_api_base, 200),
        num_threads=2,
        seed=args.seed,
        gepa_kwargs=gepa_kwargs,
    )
    optimizer = recorded(optimizer, args.out)
    optimizer.compile(
        program(),
        trainset=examples("train", TRAIN),
        valset=examples("val", VAL),
    )
    print(json.dumps(dataclasses.asdict(optimizer.result)))


if __name__ == "__main__":
    main()
