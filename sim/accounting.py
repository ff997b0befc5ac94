"""What a run's calls use and what the provider allows: tokens, dollars, rate limits.

Tokens are drawn only when something uses them (Scenario.counts_tokens:
prices, or a tokens-per-minute limit), from a stream of their own spawned
from the replicate's seed, so pricing a run leaves every latency and
acceptance draw as it was. A rollout's input and output are drawn per call;
a reflection's input is a constant at the scenario's b, its output drawn.
Each call's counts are looked at only where needed (a tokens-per-minute
bucket, a trace); dollars need only the run's totals.

Each model's provider limits are token buckets kept for the whole run (one
for requests, one for tokens; see schedule.Bucket). A stage whose whole ask
they hold at its start is paid here at once (pay_at_start); otherwise the
schedule pays them call by call, and the calls that had to wait are counted.
A model's tokens and buckets are its ModelAccount, which its stages hold.
"""

from __future__ import annotations

import numpy as np

from pxn.rate_limits import RateLimit
from pxn.scenario import Scenario
from pxn.sim.latency import Draws
from pxn.sim.schedule import Bucket, pay_at_once

# A stage's tokens: (in: per call or one number for all, out per call), views of the draws.
TokenCounts = tuple[np.ndarray | float, np.ndarray]


class ModelAccount:
    """One model's side of a run: its calls' tokens (when counted) and its provider's buckets.

    `tokens_in` is a stream of per-call draws (rollouts) or one number for every
    call (a reflection's prompt at the scenario's b); None when tokens are not counted.
    """

    def __init__(
        self,
        limit: RateLimit,
        burst_seconds: float,
        tokens_in: Draws | float | None = None,
        tokens_out: Draws | None = None,
    ):
        self.requests = None if limit.rpm is None else Bucket(limit.rpm, burst_seconds)
        self.token_bucket = None if limit.tpm is None else Bucket(limit.tpm, burst_seconds)
        self.limited = self.requests is not None or self.token_bucket is not None
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        # Each call's tokens are needed by a tokens-per-minute bucket (when tokens are counted).
        self.per_call = tokens_out is not None and self.token_bucket is not None
        self.calls = 0  # made, when tokens are counted
        self.throttled_calls = 0  # calls that waited for rate-limit capacity

    def draw(self, n: int, per_call: bool) -> TokenCounts | None:
        """n calls' tokens, counted in the run's totals; each call's only when `per_call`."""
        tokens_out = self.tokens_out
        if tokens_out is None:
            return None
        self.calls += n
        tokens_in = self.tokens_in
        if not per_call:
            if isinstance(tokens_in, Draws):
                tokens_in.skip(n)
            tokens_out.skip(n)
            return None
        if isinstance(tokens_in, Draws):
            return tokens_in.take(n), tokens_out.take(n)
        assert tokens_in is not None
        return tokens_in, tokens_out.take(n)

    def charges(self, tokens: TokenCounts | None) -> list[tuple[Bucket, list[float] | float]]:
        """What each call pays the buckets: one request, its tokens in plus out."""
        charges: list[tuple[Bucket, list[float] | float]] = []
        if self.requests is not None:
            charges.append((self.requests, 1.0))
        if self.token_bucket is not None:
            charges.append((self.token_bucket, call_tokens(tokens)))
        return charges

    def pay_at_start(self, calls: int, tokens: TokenCounts | None, start: float) -> bool:
        """Pay the buckets for a whole stage at `start` if they hold all it asks.

        Then none of its calls waits (for a stage that fits its slots). The
        same asks, to the bit, as rate_limited_schedule makes of `charges`.
        """
        # One call of pay_at_once per set of buckets, with no list built: 1.5% of an
        # every-effect replicate against building the asks (ab.py instructions).
        requests, token_bucket = self.requests, self.token_bucket
        if token_bucket is None:  # (stage_ask of one request a call)
            return pay_at_once(((requests, 1.0 * calls),), start)
        tokens_ask = (token_bucket, stage_tokens(tokens))
        if requests is None:
            return pay_at_once((tokens_ask,), start)
        return pay_at_once(((requests, 1.0 * calls), tokens_ask), start)

    def totals(self) -> tuple[float, float]:
        """(tokens in, tokens out) over the run's calls, summed in the order they were made."""
        assert self.tokens_out is not None
        tokens_in = self.tokens_in
        total_in = tokens_in.total() if isinstance(tokens_in, Draws) else tokens_in * self.calls
        return total_in, self.tokens_out.total()


def call_tokens(tokens: TokenCounts | None) -> list[float]:
    """Each call's tokens, in plus out (what a tokens-per-minute bucket counts)."""
    return _in_plus_out(tokens).tolist()


def stage_tokens(tokens: TokenCounts | None) -> float:
    """A stage's tokens: call_tokens added up in order, as stage_ask adds them.

    Python's sum over a few calls; over many, numpy's accumulate (which adds in
    order too, so the same float) costs less than making the list.
    """
    per_call = _in_plus_out(tokens)
    if len(per_call) < ACCUMULATE_FROM:
        return sum(per_call.tolist())
    return float(np.add.accumulate(per_call)[-1])


ACCUMULATE_FROM = 16  # calls


def _in_plus_out(tokens: TokenCounts | None) -> np.ndarray:
    assert tokens is not None
    tokens_in, tokens_out = tokens
    return tokens_in + tokens_out


class Accountant:
    """A run's two model accounts, and what its calls cost."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator):
        self.prices = scenario.prices
        limits = scenario.rate_limits
        burst = limits.burst_seconds
        task: tuple = ()  # (tokens in, tokens out), when counted
        reflection: tuple = ()
        if scenario.counts_tokens:
            tokens = scenario.tokens
            assert tokens is not None
            token_rng = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
            task = (Draws(tokens.rollout_input, token_rng), Draws(tokens.rollout_output, token_rng))
            reflection_in = tokens.reflection_input(scenario.minibatch)
            reflection = (reflection_in, Draws(tokens.reflection_output, token_rng))
        self.task = ModelAccount(limits.task, burst, *task)
        self.reflection = ModelAccount(limits.reflection, burst, *reflection)

    @property
    def throttled_calls(self) -> int:
        return self.task.throttled_calls + self.reflection.throttled_calls

    def dollars(self) -> float | None:
        """What the run's calls cost (None without prices)."""
        prices = self.prices
        if prices is None:
            return None
        # Prices need [tokens], so with prices every call's tokens were drawn.
        task = prices.dollars("task", *self.task.totals())
        return task + prices.dollars("reflection", *self.reflection.totals())
