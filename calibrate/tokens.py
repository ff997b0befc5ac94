"""Latency against output tokens: overhead + time per output token.

An LM call's duration grows with the tokens it writes. A robust line
(Theil-Sen: the median of pairwise slopes) shrugs off the retries and stalls
that would drag a least-squares fit. Reported only: the Scenario draws
latencies directly, and this says what they are made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.stats

from pxn.trace import Event

MIN_POINTS = 5
SUBSAMPLE = 2000


@dataclass(frozen=True)
class TokenFit:
    what: str
    n: int
    overhead: float  # seconds at zero output tokens (the intercept)
    per_token: float  # seconds per output token (the slope)
    per_token_ci: tuple[float, float]  # 95%, Theil-Sen's own interval
    spearman: float  # rank correlation of latency and tokens out


def fit_tokens(what: str, events: list[Event]) -> TokenFit | None:
    """Fit the line to the calls that report tokens_out; None when too few do."""
    pairs = [
        (float(e.tokens_out), e.duration)  # type: ignore[attr-defined]
        for e in events
        if getattr(e, "tokens_out", None) is not None
    ]
    if len(pairs) < MIN_POINTS:
        return None
    tokens, seconds = np.array(pairs).T
    if len(tokens) > SUBSAMPLE:
        # Theil-Sen weighs every pair (n^2): a fixed subsample keeps it quick.
        pick = np.random.default_rng(0).choice(len(tokens), size=SUBSAMPLE, replace=False)
        tokens, seconds = tokens[pick], seconds[pick]
    if np.ptp(tokens) == 0:
        return None  # every call wrote as many tokens: no slope to see
    slope, intercept, low, high = scipy.stats.theilslopes(seconds, tokens, alpha=0.95)
    rho = scipy.stats.spearmanr(tokens, seconds).statistic
    return TokenFit(
        what=what,
        n=len(pairs),
        overhead=float(intercept),
        per_token=float(slope),
        per_token_ci=(float(low), float(high)),
        spearman=float(rho),
    )
