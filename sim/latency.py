"""How long each call takes: its draw for the phase, the reflection's shift with b, the load.

A capped tail is already in every draw (Distribution.sample: a reply cut at
the cap, or a timed-out call retried). The cap bounds the latency measured
at the calibrated b without load; the reflection's shift for another b and
the load factor apply on top, so a slowed or shifted call can outlast the
cap (the approximation: a real client timeout bounds the slowed call too).

Each rollout phase draws from its own distribution where the scenario gives
one (Scenario.rollout_latency); phases without one share the rollout's draws.

A run's own conditions (Load.run_factor) scale every draw of its model by one
factor, drawn once per run, before the load; a rollout's draw is scaled too by
its candidate's prompt length (CandidateLengths), also before the load.

A model serving m calls at once (itself included) takes Load.factor(m)
times a call's draw, m counted at the call's start by the stage's schedule
(schedule.py). The approximation: the factor is fixed at the start, so the
last calls of a draining stage keep it while fewer run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pxn.distribution import Distribution
from pxn.load import Load
from pxn.prompt_lengths import PromptLengths


class Draws:
    """Values (latencies, token counts) drawn from a distribution in blocks.

    One scipy call serves many stages: a stage takes a view of the block
    (converting a whole block to a list cost more than drawing it); a
    block's values that do not fit the stage asking are dropped. `skip`
    hands out values unseen (only their total counts). `adjust`, if given,
    is applied elementwise to each block as it is drawn.
    """

    BLOCK = 4096

    def __init__(
        self,
        distribution: Distribution,
        rng: np.random.Generator,
        adjust: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        self.distribution = distribution
        self.rng = rng
        self.adjust = adjust
        self.block = np.empty(0)
        self.size = 0  # of the block
        self.used = 0
        self.earlier: list[np.ndarray] = []  # the values handed out from earlier blocks

    def _refill(self, n: int) -> None:
        self.earlier.append(self.block[: self.used])
        self.block = self.distribution.sample(self.rng, max(n, self.BLOCK))
        if self.adjust is not None:
            self.block = self.adjust(self.block)
        self.size = len(self.block)
        self.used = 0

    def take(self, n: int) -> np.ndarray:
        """The next n values (a view of the block)."""
        used = self.used
        if used + n > self.size:
            self._refill(n)
            used = 0
        self.used = used + n
        return self.block[used : used + n]

    def skip(self, n: int) -> None:
        if self.used + n > self.size:
            self._refill(n)
        self.used += n

    def total(self) -> float:
        """The sum of every value handed out: each block's in order, then the blocks'.

        np.cumsum adds in order, as Python's sum does (not pairwise, as
        np.sum does), so the total is the same to the bit as summing the values
        one by one.
        """
        handed_out = 0.0
        for values in [*self.earlier, self.block[: self.used]]:
            handed_out += float(np.cumsum(values)[-1]) if len(values) else 0
        return handed_out


class CallLatency:
    """The latencies of one kind of call (rollouts or reflections), stage by stage.

    `load` and `slots` are the model's: how it slows, and how many calls it serves at once.
    """

    def __init__(
        self,
        phases: dict[str, Distribution],
        rng: np.random.Generator,
        load: Load,
        slots: int,
        shift: float = 0.0,
        run_factor: float = 1.0,
    ):
        self.shift = shift  # seconds added to every draw, floored at 0
        self.run_factor = run_factor  # this run's conditions: a factor on every draw
        adjust = self._in_conditions if shift or run_factor != 1.0 else None
        # Phases with the same distribution (object) share one stream of draws.
        streams: dict[int, Draws] = {}
        for latency in phases.values():
            if id(latency) not in streams:
                streams[id(latency)] = Draws(latency, rng, adjust)
        self.draws = {phase: streams[id(latency)] for phase, latency in phases.items()}
        self.load = load
        self.slots = slots

    def _in_conditions(self, drawn: np.ndarray) -> np.ndarray:
        """Latencies as drawn, shifted (floored at 0), then scaled by this run's factor."""
        if self.shift:
            drawn = np.maximum(0.0, drawn + self.shift)
        if self.run_factor != 1.0:
            drawn = drawn * self.run_factor
        return drawn

    def draw(self, phase: str, n: int) -> np.ndarray:
        """n calls' latencies as drawn, shifted, in this run's conditions, before any load."""
        return self.draws[phase].take(n)


class CandidateLengths:
    """Each candidate's prompt length in one run, relative to the seed's (pxn.prompt_lengths).

    A proposal is first seen when its minibatch is evaluated: its length is drawn then,
    and a child that joins the pool, or an accepted merge, keeps it under its pool id.
    """

    def __init__(self, prompt: PromptLengths, rng: np.random.Generator):
        self.prompt = prompt
        self.rng = rng
        self.length = {"0": 1.0}  # the seed's

    def factors(self, candidates: list[str]) -> np.ndarray:
        """Each candidate's rollouts' latency over the seed's."""
        for candidate in candidates:
            if candidate not in self.length:
                drawn = self.rng.integers(len(self.prompt.lengths))
                self.length[candidate] = self.prompt.lengths[drawn]
        return np.array([self.prompt.factor(self.length[c]) for c in candidates])

    def joined(self, proposals: list[str], pool_ids: list[str]) -> None:
        """Proposals that joined the pool keep their lengths under their pool ids."""
        for proposal, pool_id in zip(proposals, pool_ids, strict=True):
            self.length[pool_id] = self.length[proposal]
