"""The scores an adapter call returned, checked: one finite number per example, in order.

gepa takes an adapter's EvaluationBatch on trust: one with fewer scores than
examples fails deep inside gepa on a validation (an IndexError) and, on a
minibatch, is judged on fewer examples without a word; a NaN score makes
every comparison false, so the run goes on and accepts nothing. The recorder
names the first such problem instead, and the run stops there.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def score_problem(items: Sequence[tuple[Any, Sequence[Any]]], results: Sequence[Any]) -> str | None:
    """What is wrong with an adapter call's `results` (EvaluationBatch, one per (candidate,
    examples) pair of `items`), in words; None when each pair has one finite score per
    example."""
    if len(results) != len(items):
        return f"returned {len(results)} evaluation batches for {len(items)} candidates"
    for (_, batch), result in zip(items, results, strict=True):
        scores = list(getattr(result, "scores", None) or [])
        if len(scores) != len(batch):
            return (
                f"returned {len(scores)} scores for {len(batch)} examples: return one score "
                "per example, in the batch's order"
            )
        for score in scores:
            if not isinstance(score, numbers.Real):
                return f"returned the score {score!r}: each score is a number"
            if not math.isfinite(score):
                return f"returned the score {score!r}: gepa compares sums, so each is finite"
    return None
