"""The built-in `topics` task, designed so a 135M model's real proposals can win.

GEPA optimizes only a short `hint` line inside a fixed prompt, the task LM
samples at temperature 1.0 and the metric gives partial credit: the task
drives the machinery with real proposals and latencies. Why it is built so:
docs/runner.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pxn.runner.tasks import Feedback, LMCall, Task
from pxn.runner.topic_data import ROWS, SPLITS, TOPICS


@dataclass(frozen=True)
class TopicExample:
    id: str
    sentence: str
    topic: str
    clue: str


# The hint comes first and the question last, so whatever the hint says, the last
# thing the model reads pins the answer format.
PROMPT = (
    "Hint: {hint}\n"
    "Sentence: {sentence}\n"
    "Which topic is this sentence about: music, weather, food or sports? "
    "Answer with one word."
)

SEED_HINT = "Think about what the sentence is mostly about."

# Placeholders <curr_param> and <side_info> are required by gepa 0.1.4. It ends in a
# concrete example of a hint, so a small model writes a short, on-topic one.
REFLECTION_TEMPLATE = (
    "Improve this hint for labeling sentences as sports, food, weather or music.\n\n"
    "Old hint: <curr_param>\n\n"
    "Mistakes made with the old hint:\n<side_info>\n"
    "Write the new hint between ``` and ```. Example:\n"
    "```\nWords like goal and team mean sports.\n```"
)


def _split(name: str) -> list[TopicExample]:
    lo, hi = SPLITS[name]
    return [
        TopicExample(f"{name}-{i - lo:02d}", sentence, topic, clue)
        for i, (sentence, topic, clue) in enumerate(ROWS[lo:hi], start=lo)
    ]


def program(candidate: dict[str, str], example: TopicExample, lm: LMCall) -> str:
    hint = " ".join(candidate["hint"].split()) or "(none)"
    prompt = PROMPT.format(hint=hint, sentence=example.sentence)
    return lm([{"role": "user", "content": prompt}])


_WORD = re.compile(r"[a-z]+")


def metric(example: TopicExample, output: str) -> Feedback:
    """Partial credit, so two evaluations of a minibatch rarely tie: 1.0 for the right label
    alone, 0.6 when it comes first among other words, 0.3 when a wrong label comes first
    but the right one is named too, 0 otherwise."""
    words = _WORD.findall(output.lower())
    labels = [w for w in words if w in TOPICS]
    gold = example.topic
    if not labels:
        return Feedback(
            0.0,
            f"No topic word in the answer. The topic is {gold} (clue: {example.clue}); "
            "answer with exactly one of sports, food, weather, music.",
        )
    if labels[0] == gold:
        if len(words) <= 2:
            return Feedback(1.0, f"Correct: {gold}.")
        return Feedback(0.6, f"Right topic ({gold}) but with extra words; answer with one word.")
    if gold in labels:
        return Feedback(
            0.3,
            f"Answered {labels[0]} first; the topic is {gold} (clue: {example.clue}).",
        )
    return Feedback(
        0.0,
        f"Wrong: answered {labels[0]}, but the topic is {gold} because of: {example.clue}.",
    )


def record(example: TopicExample, output: str, fb: Feedback) -> dict[str, str]:
    # Short on purpose: the reflection prompt must fit SmolLM2's 2048-token context.
    return {
        "Sentence": example.sentence,
        "Answer": " ".join(output.split())[:80],
        "Feedback": fb.feedback,
    }


def make_topic_task() -> Task:
    return Task(
        name="topics",
        description="label a sentence's topic: sports, food, weather or music (4 classes)",
        train=_split("train"),
        val=_split("val"),
        test=_split("test"),
        seed_candidate={"hint": SEED_HINT},
        program=program,
        metric=metric,
        record=record,
        reflection_prompt_template=REFLECTION_TEMPLATE,
        minibatch=3,
        lm_kwargs={"temperature": 1.0, "max_tokens": 8},
        reflection_lm_kwargs={"temperature": 0.8, "max_tokens": 40},
    )
