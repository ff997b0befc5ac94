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
"""

from __future__ import annotations

from operator import add
from typing import Any

import numpy as np

from pxn.rate_limits import RateLimit
from pxn.scenario import Scenario
from pxn.sim.latency import Draws
from pxn.sim.schedule import Bucket, pay_at_once, stage_ask

TokenCounts = tuple[list[float] | float, list[float]]  # (in: per call or one for all, out)


class Accountant:
    def __init__(self, scenario: Scenario, rng: np.random.Generator):
        self.prices = scenario.prices
        self.counts_tokens = scenario.counts_tokens
        if self.counts_tokens:
            tokens = scenario.tokens
            assert tokens is not None
            token_rng = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
            self.rollout_in = Draws(tokens.rollout_input, token_rng)
            self.rollout_out = Draws(tokens.rollout_output, token_rng)
            self.reflection_out = Draws(tokens.reflection_output, token_rng)
            self.reflection_in = tokens.reflection_input(scenario.minibatch)
        limits = scenario.rate_limits
        self.buckets = {
            "task": self._buckets(limits.task, limits.burst_seconds),
            "reflection": self._buckets(limits.reflection, limits.burst_seconds),
        }
        self.throttled_calls = 0  # calls that waited for rate-limit capacity
        self.reflections = 0  # made, when counted: their input is a constant per call

    @staticmethod
    def _buckets(limit: RateLimit, burst: float) -> tuple[Bucket | None, Bucket | None]:
        """(requests bucket, tokens bucket) for one model; None where it has no limit."""
        return (
            None if limit.rpm is None else Bucket(limit.rpm, burst),
            None if limit.tpm is None else Bucket(limit.tpm, burst),
        )

    def limited(self, role: str) -> bool:
        return self.buckets[role] != (None, None)

    def per_call(self, role: str) -> bool:
        """Whether the role's limits need each call's tokens (a tokens-per-minute bucket)."""
        return self.counts_tokens and self.buckets[role][1] is not None

    def draw(self, role: str, n: int, per_call: bool) -> TokenCounts | None:
        """n calls' tokens, counted in the run's totals; each call's only when `per_call`."""
        if not self.counts_tokens:
            return None
        if role == "task":
            if not per_call:
                self.rollout_in.skip(n)
                self.rollout_out.skip(n)
                return None
            return self.rollout_in.take(n).tolist(), self.rollout_out.take(n).tolist()
        self.reflections += n
        if not per_call:
            self.reflection_out.skip(n)
            return None
        return self.reflection_in, self.reflection_out.take(n).tolist()

    def charges(
        self, role: str, tokens: TokenCounts | None
    ) -> list[tuple[Bucket, list[float] | float]]:
        """What each call pays the role's buckets: one request, its tokens in plus out."""
        requests, token_bucket = self.buckets[role]
        charges: list[tuple[Bucket, list[float] | float]] = []
        if requests is not None:
            charges.append((requests, 1.0))
        if token_bucket is not None:
            charges.append((token_bucket, self._call_tokens(tokens)))
        return charges

    def pay_at_start(self, role: str, calls: int, tokens: TokenCounts | None, start: float) -> bool:
        """Pay the role's buckets for a whole stage at `start` if they hold all it asks.

        Then none of its calls waits (for a stage that fits its slots). The
        same asks, to the bit, as rate_limited_schedule makes of `charges`.
        """
        requests, token_bucket = self.buckets[role]
        asks = []
        if requests is not None:
            asks.append((requests, stage_ask(1.0, calls)))
        if token_bucket is not None:
            asks.append((token_bucket, stage_ask(self._call_tokens(tokens), calls)))
        return pay_at_once(asks, start)

    @staticmethod
    def _call_tokens(tokens: TokenCounts | None) -> list[float]:
        """Each call's tokens, in plus out (what a tokens-per-minute bucket counts)."""
        assert tokens is not None
        tokens_in, tokens_out = tokens
        if isinstance(tokens_in, list):
            return list(map(add, tokens_in, tokens_out))
        return [tokens_in + o for o in tokens_out]

    def spent(self, role: str, tokens_in: float, tokens_out: float) -> dict[str, Any]:
        """A call's trace fields for what it used: whole tokens, and dollars when priced."""
        spent: dict[str, Any] = {"tokens_in": round(tokens_in), "tokens_out": round(tokens_out)}
        if self.prices is not None:
            spent["cost"] = self.prices.dollars(role, tokens_in, tokens_out)
        return spent

    def dollars(self) -> float | None:
        """What the run's calls cost (None without prices)."""
        prices = self.prices
        if prices is None:
            return None
        # Prices need [tokens], so with prices every call's tokens were drawn.
        task = prices.dollars("task", self.rollout_in.total(), self.rollout_out.total())
        reflection_in = self.reflection_in * self.reflections
        return task + prices.dollars("reflection", reflection_in, self.reflection_out.total())
