"""Approximate Bayesian computation by sequential Monte Carlo (population Monte Carlo).

The likelihood of a run's reported figures under a parameter setting has no
formula, but the simulator can draw runs from it. ABC keeps the settings
whose simulated figures land close to the reported ones; ABC-SMC does so in
generations of weighted particles with a shrinking tolerance:

1. generation 0: `particles` settings from the prior, each simulated once;
2. generation t: tolerance eps_t = the weighted median of generation t-1's
   distances; settings are drawn from generation t-1 by weight, moved by a
   Gaussian kernel of twice its weighted covariance, simulated, and kept when
   their distance is at most eps_t, until `particles` are kept; each is
   weighted by prior density over the kernel mixture's density (Beaumont et
   al. 2009), so the population stays a sample of the ABC posterior.

Distances: each fact is a target interval on its own scale (a point is an
interval of width zero); its error is how far the simulated figure lies
outside it, divided by the figure's spread (its interquartile range as a
normal sd), and a setting's distance is the root of the summed squared
errors. The spread is the prior predictive's for generation 1 and the
previous population's after that (an adaptive distance, after Prangle 2017):
a figure the prior moves by orders of magnitude, like a wall-clock, would
otherwise count for little once the population has narrowed, and be fitted
loosely.

Stopping and convergence. After each generation the sampler stops when
  - the tolerance reached zero (every kept run reproduces every fact), or
  - the next generation keeps fewer than `min_acceptance` of its proposals
    (checked after each batch of `particles` proposals; that generation is
    abandoned: further narrowing costs more than it buys),
and fails when it runs `max_generations` without stopping. It has converged
when it stopped after at least two generations past the prior, the last
population's effective sample size is at least a quarter of its particles,
and no parameter's weighted median moved by more than half its
interquartile range in the last generation.

Deterministic by seed: generation t's batch j of proposals draws from its own
stream (seed, t, j), and proposals are kept in the order they were made, so
the answer does not depend on how a batch's simulations were spread over
processes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special

from pxn.calibrate.priors import NORMAL_IQR, Priors

# simulate(points (n, d) in working space, seeds) -> (n, m) figures on their scales
Simulate = Callable[[np.ndarray, list[int]], np.ndarray]
SPREAD_FLOOR = 1e-3  # a figure the population agrees on still counts, on a 0.1% scale
MOVED = 0.5  # a median that moved more than this share of its IQR is still moving


@dataclass(frozen=True)
class Settings:
    particles: int = 400
    min_acceptance: float = 0.05
    max_generations: int = 12
    min_generations: int = 2  # past the prior, before a stop counts as convergence


@dataclass(frozen=True)
class Generation:
    number: int
    tolerance: float
    kept: int
    simulations: int
    ess: float

    @property
    def acceptance_rate(self) -> float:
        return self.kept / self.simulations


@dataclass(frozen=True)
class Population:
    points: np.ndarray  # (n, d) working space
    weights: np.ndarray  # (n,), summing to 1
    figures: np.ndarray  # (n, m) on each fact's scale
    distances: np.ndarray  # (n,)

    @property
    def ess(self) -> float:
        return float(1 / np.sum(self.weights**2))

    def quantiles(self, column: int, qs: list[float]) -> np.ndarray:
        return weighted_quantiles(self.points[:, column], self.weights, qs)


@dataclass(frozen=True)
class Outcome:
    population: Population
    previous: Population | None  # the generation before the last, for the stability check
    history: tuple[Generation, ...]
    converged: bool
    verdict: str  # why it stopped, or why it did not converge

    @property
    def simulations(self) -> int:
        return sum(g.simulations for g in self.history)


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: list[float]) -> np.ndarray:
    """Quantiles of a weighted sample (the inverse of its step CDF, midpoints interpolated)."""
    order = np.argsort(values)
    sorted_values, sorted_weights = values[order], weights[order]
    cdf = (np.cumsum(sorted_weights) - 0.5 * sorted_weights) / np.sum(sorted_weights)
    return np.interp(qs, cdf, sorted_values)


def errors(figures: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """How far each figure lies outside its target interval (inf where it is not a number)."""
    excess = np.maximum(np.maximum(low - figures, figures - high), 0.0)
    return np.where(np.isnan(figures), np.inf, excess)


def spread(figures: np.ndarray) -> np.ndarray:
    """Each figure's spread over a population's runs: its IQR as a normal sd."""
    spread = []
    for column in figures.T:
        finite = column[np.isfinite(column)]
        iqr = np.subtract(*np.percentile(finite, [75, 25])) if finite.size else 0.0
        spread.append(max(iqr / NORMAL_IQR, SPREAD_FLOOR))
    return np.array(spread)


def abc_smc(
    priors: Priors,
    simulate: Simulate,
    low: np.ndarray,
    high: np.ndarray,
    settings: Settings,
    seed: int,
    on_generation: Callable[[Generation], None] | None = None,
) -> Outcome:
    """The ABC posterior of `priors` given facts in [low, high] (see the module docstring)."""
    n = settings.particles
    rng = _stream(seed, 0, 0)
    points = priors.sample(rng, n)
    figures = simulate(points, _seeds(rng, n))
    population = Population(points, np.full(n, 1 / n), figures, np.zeros(n))
    history = [Generation(0, math.inf, n, n, float(n))]
    if on_generation:
        on_generation(history[0])
    previous: Population | None = None
    reason = ""
    for t in range(1, settings.max_generations + 1):
        scale = spread(population.figures)  # generation 0's: the prior predictive's

        def distance(figs: np.ndarray, scale: np.ndarray = scale) -> np.ndarray:
            return np.sqrt(np.sum((errors(figs, low, high) / scale) ** 2, axis=1))

        population = dataclasses.replace(population, distances=distance(population.figures))
        tolerance = float(weighted_quantiles(population.distances, population.weights, [0.5])[0])
        if not np.isfinite(tolerance):
            tolerance = float(np.min(population.distances))
        step = _generation(
            priors, simulate, distance, population, tolerance, n, settings.min_acceptance, (seed, t)
        )
        if step is None:
            reason = (
                f"generation {t} kept fewer than {settings.min_acceptance:.0%} of its "
                f"proposals at tolerance {tolerance:.3g} and was abandoned"
            )
            break
        new, simulations = step
        previous, population = population, new
        history.append(Generation(t, tolerance, n, simulations, new.ess))
        if on_generation:
            on_generation(history[-1])
        if tolerance == 0:
            reason = "the tolerance reached zero: every kept run reproduces every fact"
            break
    else:
        return Outcome(
            population,
            previous,
            tuple(history),
            False,
            f"still narrowing after {settings.max_generations} generations",
        )
    converged, verdict = _check(population, previous, len(history) - 1, settings, priors, reason)
    return Outcome(population, previous, tuple(history), converged, verdict)


def _check(
    population: Population,
    previous: Population | None,
    generations: int,
    settings: Settings,
    priors: Priors,
    reason: str,
) -> tuple[bool, str]:
    if generations < settings.min_generations or previous is None:
        return False, f"{reason}, after only {generations} generation(s) past the prior"
    if population.ess < settings.particles / 4:
        return False, (
            f"{reason}, but its weights are degenerate (effective sample size "
            f"{population.ess:.0f} of {settings.particles})"
        )
    for i, (path, _) in enumerate(priors):
        q25, median, q75 = population.quantiles(i, [0.25, 0.5, 0.75])
        before = previous.quantiles(i, [0.5])[0]
        if abs(median - before) > MOVED * max(q75 - q25, 1e-12):
            return False, (
                f"{reason}, but {path} was still moving (its median shifted by "
                f"{abs(median - before) / (q75 - q25):.2f} of its IQR "
                "in the last generation)"
            )
    return True, reason


def _generation(
    priors: Priors,
    simulate: Simulate,
    distance: Callable[[np.ndarray], np.ndarray],
    population: Population,
    tolerance: float,
    n: int,
    low_rate: float,
    key: tuple[int, int],
) -> tuple[Population, int] | None:
    """The next population at `tolerance`, and the simulations it took.

    None (abandoned) as soon as a batch ends with fewer kept than `low_rate` of
    the proposals so far.
    """
    covariance = 2 * np.atleast_2d(
        np.cov(population.points, rowvar=False, aweights=population.weights)
    )
    covariance += np.eye(len(covariance)) * 1e-12  # a parameter every particle agrees on
    kernel = np.linalg.cholesky(covariance)
    kept_points, kept_figures, kept_distances = [], [], []
    simulations, batch = 0, 0
    while len(kept_points) < n:
        if simulations and len(kept_points) < low_rate * simulations:
            return None
        rng = _stream(key[0], key[1], batch)
        points = _propose(priors, population, kernel, rng, n)
        figures = simulate(points, _seeds(rng, n))
        distances = distance(figures)
        keep = distances <= tolerance
        kept_points += list(points[keep])
        kept_figures += list(figures[keep])
        kept_distances += list(distances[keep])
        simulations += n
        batch += 1
    points = np.array(kept_points[:n])
    weights = _weights(priors, population, covariance, points)
    return (
        Population(points, weights, np.array(kept_figures[:n]), np.array(kept_distances[:n])),
        simulations,
    )


def _propose(
    priors: Priors, population: Population, kernel: np.ndarray, rng: np.random.Generator, size: int
) -> np.ndarray:
    """`size` perturbed particles inside the prior's support, drawn again where outside."""
    out = np.empty((size, population.points.shape[1]))
    todo = np.arange(size)
    while todo.size:
        parents = rng.choice(len(population.weights), size=todo.size, p=population.weights)
        steps = rng.standard_normal((todo.size, len(kernel))) @ kernel.T
        moved = population.points[parents] + steps
        inside = np.isfinite(priors.log_density(moved))
        out[todo[inside]] = moved[inside]
        todo = todo[~inside]
    return out


def _weights(
    priors: Priors, population: Population, covariance: np.ndarray, points: np.ndarray
) -> np.ndarray:
    """Prior density over the density of the kernel mixture that proposed them."""
    precision = np.linalg.inv(covariance)
    diffs = points[:, None, :] - population.points[None, :, :]
    mahalanobis = np.einsum("ijk,kl,ijl->ij", diffs, precision, diffs)
    log_kernel = -0.5 * mahalanobis  # the kernel's constant cancels on normalising
    log_mixture = scipy.special.logsumexp(log_kernel, axis=1, b=population.weights[None, :])
    log_w = priors.log_density(points) - log_mixture
    w = np.exp(log_w - np.max(log_w))
    return w / w.sum()


def _stream(seed: int, generation: int, batch: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(generation, batch)))


def _seeds(rng: np.random.Generator, size: int) -> list[int]:
    """A simulation seed per proposal, from the proposal's own stream."""
    return rng.integers(0, 2**32, size=size).tolist()
