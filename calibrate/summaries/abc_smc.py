"""Approximate Bayesian computation by sequential Monte Carlo with MCMC moves.

The likelihood of a run's reported figures under a parameter setting has no
formula, but the simulator can draw runs from it. ABC keeps the settings
whose simulated figures land close to the reported ones; ABC-SMC does so for
a population of particles under a shrinking tolerance. This is the
replenishment sampler of Drovandi and Pettitt (2011):

1. generation 0: `particles` settings from the prior, each simulated once;
2. a pilot fixes the distance (below), once;
3. generation t: the tolerance eps_t is the larger of the noise level and the
   population's median distance. The particles beyond it are dropped and
   replaced by copies of those within; each copy then takes R steps of
   Metropolis-Hastings ABC (Marjoram et al. 2003): a Gaussian step, accepted
   when the prior allows it (by the Metropolis ratio) and its simulated run
   lies within eps_t. The step's covariance is the particles' within,
   scaled by 2.38^2 / d and then by a length: the copies' first step tries
   each length of a ladder (1, 1/2, ... 1/16), and the longest accepted at
   least GOOD_RATE of the time (else the shortest) is kept for the rest. R
   is the number of steps after which a copy has stayed where it was with
   chance at most `unmoved`, at that length's acceptance rate. The moves
   leave the ABC posterior at eps_t invariant, so every particle keeps the
   same weight. Each move stops its runs as soon as the facts read so far put
   it beyond the tolerance (a `Cutoff`).

Distances. Each fact is a target interval on its own scale (a point is an
interval of width zero); its error is how far the simulated figure lies
outside it, in a fixed unit: the simulator's run-to-run sd of that figure
(a reported figure is one run), or the fact's reporting precision where that
is larger. A setting's distance is the root of the summed squared errors.
The run-to-run sd comes from a pilot: the `pilot_settings` prior draws that
fit the facts best (on the prior predictive's spread) are each simulated
`pilot_replicates` times, and each figure's sd is pooled over them (the
root of the mean of their variances). The unit never changes afterwards, so a
falling tolerance means runs closer to the facts, in the facts' own terms.

The noise level: the distance a run has from the facts when its setting
reproduces every fact on average (each figure's mean on the reported value,
a range's middle, a bound's edge); the `noise_quantile` (90%) of it over the
pilot's runs, each setting's runs moved there. A tighter tolerance would
reject many runs of a true setting itself: the facts, each one run, say no
more. The rerun level: the same for a run measured against another run of
its setting, their difference moved onto the facts; the facts being one run
themselves, it is the distance a true setting's runs keep from them.

Stopping and convergence. It has converged when
  - a generation ran at the noise level, or
  - the tolerance stopped decreasing (above `stalled` of the last one) while
    moves were still accepted at least at `min_acceptance`: no setting within
    the priors fits the facts closer, and the population is the best fit the
    model has (the posterior predictive check then shows which facts it
    misses), or
  - a generation's first steps were accepted at less than `min_acceptance`
    (that generation is abandoned) after one had run within the rerun level:
    the population already holds the settings whose runs sit as close to the
    facts as a true setting's would;
and at least a quarter of the particles are distinct. It has not when a
generation is abandoned before one ran within the rerun level, or after
`max_generations`.

Deterministic by seed: the prior draws, the pilot, the resampling and each
particle's moves draw from streams of their own (seed, generation, ...), so
the answer does not depend on how the simulations were spread over processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pxn.calibrate.summaries.abc_distance import (
    SPREAD_FLOOR,
    Cutoff,
    MapInOrder,
    Scale,
    Simulator,
    errors,
    simulate_all,
    spread,
)
from pxn.calibrate.summaries.abc_moves import Chain
from pxn.calibrate.summaries.priors import Priors

STEP_SCALE = 2.38**2  # over d: the random-walk Metropolis step of Roberts and Rosenthal (2001)
# The step lengths a generation's first step tries, longest first, as shares of that step.
LADDER = (1.0, 0.5, 0.25, 0.125, 0.0625)
GOOD_RATE = 0.2  # the longest step accepted at least this often is taken
RESAMPLE, FIRST_STEP, MORE_STEPS = 0, 1, 2  # stream keys within a generation


@dataclass(frozen=True)
class Settings:
    particles: int = 400
    min_acceptance: float = 0.05
    max_generations: int = 20
    pilot_settings: int = 10
    pilot_replicates: int = 10
    noise_quantile: float = 0.9
    unmoved: float = 0.05  # the chance a copy may keep of not having moved
    stalled: float = 0.95  # a tolerance above this share of the last has stopped decreasing


@dataclass(frozen=True)
class Generation:
    number: int
    tolerance: float
    replaced: int  # particles dropped and replaced by moved copies
    step_length: float  # the share of the Roberts-Rosenthal step taken
    steps: int  # MCMC steps each copy took
    acceptance_rate: float  # of those steps
    simulations: int  # runs begun (a run stopped at a cutoff counts as one)
    distinct: int  # distinct particles after it


@dataclass(frozen=True)
class Population:
    """Equally weighted particles: a sample of the ABC posterior at the last tolerance."""

    points: np.ndarray  # (n, d) working space
    figures: np.ndarray  # (n, m) on each fact's scale
    distances: np.ndarray  # (n,)

    def quantiles(self, column: int, qs: list[float]) -> np.ndarray:
        return np.quantile(self.points[:, column], qs)

    @property
    def distinct(self) -> int:
        return len(np.unique(self.points, axis=0))


@dataclass(frozen=True)
class AbcSmcResult:
    """Where the sampler stopped: its last population, the fixed distance, the generations
    that led there, and whether it converged (the verdict says why, or why not)."""

    population: Population
    scale: Scale
    history: tuple[Generation, ...]
    converged: bool
    verdict: str  # why it stopped, or why it did not converge

    @property
    def simulations(self) -> int:
        return sum(g.simulations for g in self.history) + self.scale.simulations


def abc_smc(
    priors: Priors,
    simulator: Simulator,
    run: MapInOrder,
    low: np.ndarray,
    high: np.ndarray,
    precision: np.ndarray,
    settings: Settings,
    seed: int,
    on_generation: Callable[[Generation], None] | None = None,
) -> AbcSmcResult:
    """The ABC posterior of `priors` given facts in [low, high] (see the module docstring).

    `precision`: each fact's reporting precision on its scale, the least unit of its error.
    """
    n = settings.particles
    rng = _stream(seed, 0, 0)
    points = priors.sample(rng, n)
    figures = simulate_all(simulator, run, points, _seeds(rng, n))
    history = [Generation(0, math.inf, n, 1.0, 0, 1.0, n, n)]
    if on_generation:
        on_generation(history[0])
    scale = pilot(simulator, run, points, figures, low, high, precision, settings, seed)
    population = Population(points, figures, scale.distance(figures, low, high))
    for t in range(1, settings.max_generations + 1):
        median = float(np.median(population.distances))
        if not np.isfinite(median):  # most of the prior's settings could not be simulated
            median = float(np.min(population.distances))
        tolerance = max(median, scale.noise_level)
        moved = _generation(
            priors, simulator, run, Cutoff(scale, low, high, tolerance), population, settings,
            (seed, t),
        )  # fmt: skip
        if isinstance(moved, float):
            last = history[-1].tolerance
            if last <= scale.rerun_level:
                reason = (
                    f"generation {t - 1} ran at {last:.3g}, within the rerun level "
                    f"{scale.rerun_level:.3g}; generation {t}, at {tolerance:.3g}, was accepted "
                    f"at {moved:.1%} and abandoned"
                )
                return _result(population, scale, history, settings, reason)
            verdict = (
                f"generation {t}'s first steps were accepted at {moved:.1%}, below "
                f"{settings.min_acceptance:.0%}, at tolerance {tolerance:.3g} (the noise level "
                f"is {scale.noise_level:.3g}), and it was abandoned"
            )
            return AbcSmcResult(population, scale, tuple(history), False, verdict)
        population, generation = moved
        history.append(generation)
        if on_generation:
            on_generation(generation)
        if tolerance <= scale.noise_level:
            reason = f"generation {t} ran at the noise level {scale.noise_level:.3g}"
            return _result(population, scale, history, settings, reason)
        if t > 1 and tolerance > settings.stalled * history[-2].tolerance:
            reason = (
                f"the tolerance stopped decreasing at {tolerance:.3g}, above the noise level "
                f"{scale.noise_level:.3g}: no setting within the priors fits the facts closer"
            )
            return _result(population, scale, history, settings, reason)
    verdict = (
        f"still narrowing after {settings.max_generations} generations (tolerance "
        f"{history[-1].tolerance:.3g}, noise level {scale.noise_level:.3g})"
    )
    return AbcSmcResult(population, scale, tuple(history), False, verdict)


def pilot(
    simulator: Simulator,
    run: MapInOrder,
    points: np.ndarray,
    figures: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    precision: np.ndarray,
    settings: Settings,
    seed: int,
) -> Scale:
    """The fixed distance, from replicate runs of the prior's best-fitting settings."""
    provisional = np.sqrt(np.sum((errors(figures, low, high) / spread(figures)) ** 2, axis=1))
    best = np.argsort(provisional, kind="stable")[: settings.pilot_settings]
    best = best[np.isfinite(provisional[best])]
    r = settings.pilot_replicates
    rng = _stream(seed, 0, 1)
    runs = simulate_all(
        simulator, run, np.repeat(points[best], r, axis=0), _seeds(rng, len(best) * r)
    )
    centre = np.where(np.isfinite(high), (low + high) / 2, low)
    variances, moved, reruns = [], [], []
    for setting in runs.reshape(len(best), r, -1):
        finite = setting[np.all(np.isfinite(setting), axis=1)]
        if len(finite) >= 2:
            variances.append(np.var(finite, axis=0, ddof=1))
            # The setting's runs moved so that their mean sits on the facts.
            moved.append(finite - finite.mean(axis=0) + centre)
            # Each run against the next, as against facts that are one run of it.
            reruns.append(finite - np.roll(finite, 1, axis=0) + centre)
    if not variances:  # no setting ran twice: no noise is known, every unit is the precision
        variances, moved, reruns = [np.zeros_like(low)], [centre[None, :]], [centre[None, :]]
    noise = np.sqrt(np.mean(variances, axis=0))  # pooled: a figure some settings vary counts
    units = np.maximum(np.maximum(noise, precision), SPREAD_FLOOR)

    def level(runs: list[np.ndarray]) -> float:
        distances = np.sqrt(np.sum((errors(np.concatenate(runs), low, high) / units) ** 2, axis=1))
        return float(np.quantile(distances, settings.noise_quantile))

    return Scale(noise, units, level(moved), level(reruns), len(best) * r)


def _result(
    population: Population,
    scale: Scale,
    history: list[Generation],
    settings: Settings,
    reason: str,
) -> AbcSmcResult:
    if population.distinct < settings.particles / 4:
        verdict = (
            f"{reason}, but only {population.distinct} of its {settings.particles} particles "
            "are distinct (the moves rarely left their copies)"
        )
        return AbcSmcResult(population, scale, tuple(history), False, verdict)
    return AbcSmcResult(population, scale, tuple(history), True, reason)


def _generation(
    priors: Priors,
    simulator: Simulator,
    run: MapInOrder,
    cutoff: Cutoff,
    population: Population,
    settings: Settings,
    key: tuple[int, int],
) -> tuple[Population, Generation] | float:
    """The population at the cutoff's tolerance, and its record; or, when the first
    steps were accepted too rarely to afford the rest, their acceptance rate."""
    inside = np.flatnonzero(population.distances <= cutoff.tolerance)
    dropped = len(population.distances) - len(inside)
    if dropped == 0:  # every particle is within already
        return population, Generation(
            key[1], cutoff.tolerance, 0, 0.0, 0, 1.0, 0, population.distinct
        )
    rng = _stream(*key, RESAMPLE)
    copies = rng.choice(inside, size=dropped)
    d = population.points.shape[1]
    # Fewer particles inside than dimensions span no volume to step in (one has no spread at
    # all: a NaN covariance, every step NaN): then the whole population's sets the steps.
    spread = population.points[inside] if len(inside) > d else population.points
    covariance = np.atleast_2d(np.cov(spread, rowvar=False))
    covariance = STEP_SCALE / d * covariance + np.eye(d) * 1e-12  # a parameter all agree on
    chain = Chain(priors, simulator, cutoff, np.linalg.cholesky(covariance))
    start = (population.points[copies], population.figures[copies], population.distances[copies])
    # The first step tries each length of the ladder on a share of the copies.
    tried = np.resize(np.array(LADDER), dropped)
    first = chain.walk(run, *start, tried, 1, _seeds(_stream(*key, FIRST_STEP), dropped))
    rates = [
        (length, float(np.mean(first.accepted[tried == length])))
        for length in LADDER[: min(dropped, len(LADDER))]
    ]
    length, rate = next(((a, r) for a, r in rates if r >= GOOD_RATE), rates[-1])
    if rate < settings.min_acceptance:
        return rate
    steps = 1 if rate == 1 else math.ceil(math.log(settings.unmoved) / math.log(1 - rate))
    more = chain.walk(
        run, first.points, first.figures, first.distances, np.full(dropped, length), steps - 1,
        _seeds(_stream(*key, MORE_STEPS), dropped),
    )  # fmt: skip
    population = Population(
        np.concatenate([population.points[inside], more.points]),
        np.concatenate([population.figures[inside], more.figures]),
        np.concatenate([population.distances[inside], more.distances]),
    )
    proposals = dropped * steps
    accepted = int(first.accepted.sum() + more.accepted.sum())
    generation = Generation(
        key[1], cutoff.tolerance, dropped, length, steps, accepted / max(proposals, 1),
        first.simulations + more.simulations, population.distinct,
    )  # fmt: skip
    return population, generation


def _stream(seed: int, generation: int, part: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(generation, part)))


def _seeds(rng: np.random.Generator, size: int) -> list[int]:
    """A seed per simulation or chain, from the caller's own stream."""
    return rng.integers(0, 2**32, size=size).tolist()
