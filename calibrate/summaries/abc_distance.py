"""ABC-SMC's distance and its runs: the simulator it asks for a run of the facts, those
runs spread over processes in chunks, each fact's error in a fixed unit (Scale), and the
tolerance a run may stop at (Cutoff). The distance itself is abc_smc.py's docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pxn.calibrate.summaries.priors import NORMAL_IQR

SPREAD_FLOOR = 1e-3  # a figure every run agrees on still counts, on a 0.1% scale
CHUNK = 8  # particles per unit of work handed to a process


class Simulator(Protocol):
    """A picklable model of the facts: one run of each at a working-space point."""

    def figures(self, point: np.ndarray, seed: int, cutoff: Cutoff | None) -> np.ndarray:
        """Each fact's figure on its scale; with a cutoff, NaN past the facts it stopped at."""
        ...


# run(fn, units) -> [fn(*unit) for unit in units], spread over processes, in order
MapInOrder = Callable[[Callable[..., Any], list[tuple]], list[Any]]


@dataclass(frozen=True)
class Scale:
    """The fixed distance: each fact's unit, and the tolerance the noise allows."""

    noise: np.ndarray  # (m,) each figure's run-to-run sd, from the pilot
    units: np.ndarray  # (m,) the larger of that and the fact's reporting precision
    noise_level: float
    rerun_level: float  # the distance a true setting's runs keep from facts of one run
    simulations: int  # the pilot's

    def distance(self, figures: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        return np.sqrt(np.sum((errors(figures, low, high) / self.units) ** 2, axis=-1))


@dataclass(frozen=True)
class Cutoff:
    """A tolerance a simulation may stop at: past it, the setting is rejected whatever its
    remaining figures (each only adds to the distance), so they need not be simulated."""

    scale: Scale
    low: np.ndarray
    high: np.ndarray
    tolerance: float

    def exceeded(self, figures: np.ndarray) -> bool:
        """Whether the figures known so far (the others NaN) already lie beyond it."""
        known = ~np.isnan(figures)
        misses = errors(figures[known], self.low[known], self.high[known]) / self.scale.units[known]
        return bool(np.sqrt(np.sum(misses**2)) > self.tolerance)

    def within(self, figures: np.ndarray) -> bool:
        return bool(self.scale.distance(figures, self.low, self.high) <= self.tolerance)


def errors(figures: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """How far each figure lies outside its target interval (inf where it is not a number)."""
    with np.errstate(invalid="ignore"):  # an infinite figure beside an infinite bound
        excess = np.maximum(np.maximum(low - figures, figures - high), 0.0)
    return np.where(np.isfinite(figures), excess, np.inf)


def spread(figures: np.ndarray) -> np.ndarray:
    """Each figure's spread over a population's runs: its IQR as a normal sd."""
    spread = []
    for column in figures.T:
        finite = column[np.isfinite(column)]
        iqr = np.subtract(*np.percentile(finite, [75, 25])) if finite.size else 0.0
        spread.append(max(iqr / NORMAL_IQR, SPREAD_FLOOR))
    return np.array(spread)


def simulate_all(
    simulator: Simulator, run: MapInOrder, points: np.ndarray, seeds: list[int]
) -> np.ndarray:
    """One run of the facts at each point, in the points' order."""
    units = [
        (simulator, points[i : i + CHUNK], seeds[i : i + CHUNK])
        for i in range(0, len(points), CHUNK)
    ]
    return np.concatenate(run(_simulate_chunk, units))


def _simulate_chunk(simulator: Simulator, points: np.ndarray, seeds: list[int]) -> np.ndarray:
    return np.array([simulator.figures(p, s, None) for p, s in zip(points, seeds, strict=True)])
