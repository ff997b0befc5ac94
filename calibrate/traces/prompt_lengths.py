"""The [prompt] table: how a candidate's prompt length scales its rollouts (pxn.prompt_lengths).

Every rollout records its prompt's tokens (tokens_in). A candidate's length is
the median, over the examples both were run on, of its tokens over the seed's
on the same example, so the example's own text divides out. The exponent is
the least-squares slope of log latency (served alone: the load taken off) on
log length over the timed rollouts. The proposals' lengths are those of the
candidates the reflections proposed (a child's minibatch is its first
evaluation) and the merges made.

The part is kept when the proposals' lengths differ from the seed's (one by
more than 10%) and the slope is above 0 by twice its standard error; else
every candidate's rollouts take the seed's latency and the report says why.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pxn.calibrate.traces.units import Calls
from pxn.prompt_lengths import MAX_EXPONENT, PromptLengths
from pxn.trace import Rollout
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration

SEED = "0"
PROPOSED_IN = ("child_minibatch", "merge_subsample")  # a candidate's first evaluation
DIFFERS = 0.10  # a proposal's length this far from the seed's shows the effect can matter


@dataclass(frozen=True)
class PromptFit:
    lengths: tuple[float, ...]  # the proposals' lengths, over the seed's
    exponent: float  # the slope; nan when it could not be fitted
    stderr: float
    rollouts: int  # timed rollouts of a candidate of known length
    chosen: PromptLengths | None
    reason: str
    # Each rollout event's candidate's length, by the event's id (the fits' rows hold events).
    length_of: dict[int, float] = field(default_factory=dict, repr=False)

    def factors(self, calls: Calls, exponent: float | None = None) -> np.ndarray | None:
        """Each call's latency over the seed's at the chosen exponent (or `exponent`); None
        without the part."""
        if self.chosen is None:
            return None
        power = self.chosen.exponent if exponent is None else exponent
        # Each call's candidate's length (1 for reflections and unknown candidates).
        return np.array([self.length_of.get(id(event), 1.0) for event in calls.event]) ** power


def candidate_lengths(trace: Trace) -> tuple[dict[str, float], list[str]]:
    """Each candidate's prompt length over the seed's in one run, and the candidates proposed
    (in order of their first evaluation)."""
    tokens: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    proposed: list[str] = []
    for rollout in trace.of(Rollout):
        if rollout.tokens_in is None:
            continue
        tokens[rollout.candidate][rollout.example].append(float(rollout.tokens_in))
        if rollout.phase in PROPOSED_IN and rollout.candidate not in proposed:
            proposed.append(rollout.candidate)
    seed = {example: float(np.median(t)) for example, t in tokens.get(SEED, {}).items()}
    lengths = {}
    for candidate, by_example in tokens.items():
        ratios = [np.median(t) / seed[ex] for ex, t in by_example.items() if seed.get(ex)]
        if ratios:
            lengths[candidate] = float(np.median(ratios))
    return lengths, [c for c in proposed if c in lengths]


def fit_prompt_lengths(traces: Sequence[Trace], served: Calls) -> PromptFit:
    """The part from the traces' token counts and the rollouts served alone (at the load
    slowdowns, before any prompt factor)."""
    length_of: dict[int, float] = {}
    lengths: list[float] = []
    for trace in traces:
        by_candidate, proposed = candidate_lengths(trace)
        lengths.extend(by_candidate[c] for c in proposed)
        for rollout in trace.of(Rollout):
            if rollout.candidate in by_candidate:
                length_of[id(rollout)] = by_candidate[rollout.candidate]
    if not lengths:
        return PromptFit(
            (), math.nan, math.nan, 0, None,
            "no proposal's prompt tokens were recorded with the seed's: every candidate's "
            "rollouts are taken at the seed's latency",
        )  # fmt: skip
    exponent, stderr, n = slope(served, length_of)
    shown = max(abs(x - 1.0) for x in lengths) > DIFFERS
    chosen = None
    if not shown:
        reason = f"no proposal's prompt differs from the seed's by more than {DIFFERS:.0%}"
    elif not (stderr > 0 and exponent - 2 * stderr > 0):
        reason = (
            "the rollouts' latency does not grow with the prompt by more than twice its "
            "standard error"
        )
    else:
        chosen = PromptLengths(min(exponent, MAX_EXPONENT), tuple(round(x, 4) for x in lengths))
        reason = "latency grows with the prompt: each proposal's length drawn from the runs'"
    return PromptFit(tuple(lengths), exponent, stderr, n, chosen, reason, length_of)


def slope(served: Calls, length_of: dict[int, float]) -> tuple[float, float, int]:
    """Least-squares slope of log latency on log length over the timed, finished rollouts of
    known length: (slope, its standard error, rollouts); nan where they cannot show one."""
    known = np.array([id(e) in length_of for e in served.event], bool)
    rows = served.of("rollout") & ~served.censored & (served.latency > 0) & known
    x = np.log([length_of[id(e)] for e in served.event[rows]])
    y = np.log(served.latency[rows])
    n = len(x)
    if n < 3 or np.ptp(x) == 0:
        return math.nan, math.nan, n
    x_centred = x - x.mean()
    beta = float(x_centred @ (y - y.mean()) / (x_centred @ x_centred))
    residuals = y - y.mean() - beta * x_centred
    stderr = float(np.sqrt(residuals @ residuals / (n - 2) / (x_centred @ x_centred)))
    return beta, stderr, n


def refit_exponent(fit: PromptFit, served: Calls) -> float:
    """The exponent refitted to resampled rollouts (served alone, before the prompt factor),
    within [0, MAX_EXPONENT]; the point value when the resample cannot show a slope."""
    beta, _, _ = slope(served, fit.length_of)
    if math.isnan(beta):
        return fit.chosen.exponent
    return min(max(beta, 0.0), MAX_EXPONENT)


def prompt_line(cal: Calibration) -> str:
    fit = cal.prompt
    if not fit.lengths:
        return f"prompt length: {fit.reason}"
    low, high = min(fit.lengths), max(fit.lengths)
    measured = f"{len(fit.lengths)} proposals' prompts at {low:.2f}-{high:.2f} x the seed's; " + (
        f"latency ~ length^{fit.exponent:.2f} (se {fit.stderr:.2f}, {fit.rollouts} rollouts)"
        if not math.isnan(fit.exponent)
        else "no slope could be fitted"
    )
    verdict = "[prompt] written" if fit.chosen is not None else "not written"
    return f"prompt length: {measured}; {verdict}: {fit.reason}"
