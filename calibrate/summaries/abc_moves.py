"""ABC-SMC's moves: Metropolis-Hastings ABC chains at one tolerance (Marjoram et al.
2003), each copy of a particle walked from its own seed, in chunks a worker process runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pxn.calibrate.summaries.abc_distance import CHUNK, Cutoff, MapInOrder, Simulator
from pxn.calibrate.summaries.priors import Priors


@dataclass(frozen=True)
class Walked:
    points: np.ndarray
    figures: np.ndarray
    distances: np.ndarray
    accepted: np.ndarray  # (n,) steps each chain accepted
    simulations: int


@dataclass(frozen=True)
class Chain:
    """Metropolis-Hastings ABC at one tolerance: what moves a particle (picklable)."""

    priors: Priors
    simulator: Simulator
    cutoff: Cutoff
    step: np.ndarray  # lower Cholesky factor of the Gaussian step's covariance

    def walk(
        self,
        run: MapInOrder,
        points: np.ndarray,
        figures: np.ndarray,
        distances: np.ndarray,
        lengths: np.ndarray,
        steps: int,
        seeds: list[int],
    ) -> Walked:
        """Each particle `steps` steps on, of its length, its chain drawing from its seed."""
        if steps == 0 or len(points) == 0:
            return Walked(points, figures, distances, np.zeros(len(points), dtype=int), 0)
        units = [
            (self, points[i : i + CHUNK], figures[i : i + CHUNK], distances[i : i + CHUNK],
             lengths[i : i + CHUNK], steps, seeds[i : i + CHUNK])
            for i in range(0, len(points), CHUNK)
        ]  # fmt: skip
        parts = run(_walk_chunk, units)
        return Walked(
            np.concatenate([p.points for p in parts]),
            np.concatenate([p.figures for p in parts]),
            np.concatenate([p.distances for p in parts]),
            np.concatenate([p.accepted for p in parts]),
            sum(p.simulations for p in parts),
        )

    def move(
        self,
        point: np.ndarray,
        figures: np.ndarray,
        distance: float,
        length: float,
        steps: int,
        seed: int,
    ) -> tuple[np.ndarray, np.ndarray, float, int, int]:
        """One particle's chain: where it ends, its figures and distance, the steps
        accepted and the runs simulated."""
        rng = np.random.default_rng(seed)
        accepted = simulations = 0
        log_prior = float(self.priors.log_density(point[None, :])[0])
        for _ in range(steps):
            proposal = point + length * (self.step @ rng.standard_normal(len(point)))
            proposed_prior = float(self.priors.log_density(proposal[None, :])[0])
            threshold = math.log(rng.random())
            seed_of_run = int(rng.integers(0, 2**32))
            if not threshold < proposed_prior - log_prior:  # the prior refuses it (or -inf)
                continue
            simulations += 1
            proposed = self.simulator.figures(proposal, seed_of_run, self.cutoff)
            if not self.cutoff.within(proposed):
                continue
            point, figures, log_prior = proposal, proposed, proposed_prior
            distance = float(
                self.cutoff.scale.distance(proposed, self.cutoff.low, self.cutoff.high)
            )
            accepted += 1
        return point, figures, distance, accepted, simulations


def _walk_chunk(
    chain: Chain,
    points: np.ndarray,
    figures: np.ndarray,
    distances: np.ndarray,
    lengths: np.ndarray,
    steps: int,
    seeds: list[int],
) -> Walked:
    """One unit of work: a few particles' chains (a worker process runs it)."""
    moved = [
        chain.move(p, f, float(d), float(a), steps, s)
        for p, f, d, a, s in zip(points, figures, distances, lengths, seeds, strict=True)
    ]
    return Walked(
        np.array([m[0] for m in moved]),
        np.array([m[1] for m in moved]),
        np.array([m[2] for m in moved]),
        np.array([m[3] for m in moved], dtype=int),
        sum(m[4] for m in moved),
    )
