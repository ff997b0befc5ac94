"""Approximate Bayesian computation by sequential Monte Carlo with MCMC moves.

Drovandi and Pettitt's (2011) replenishment sampler; docs/calibration.md ("The
inference, in words") gives its distance, noise and rerun levels, generations and
convergence. The moves are Metropolis-Hastings ABC steps with the particles' covariance
times 2.38^2 / d, their length the longest of LADDER accepted at least GOOD_RATE of the
time; they leave the ABC posterior at the tolerance invariant, so the weights stay equal.
Every random draw comes from a stream of its own (seed, generation, ...), so the answer
does not depend on how simulations were spread over processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pxn.calibrate.summaries.priors import NORMAL_IQR, Priors

SPREAD_FLOOR = 1e-3  # a figure every run agrees on still counts, on a 0.1% scale
CHUNK = 8  # particles per unit of work handed to a process
STEP_SCALE = 2.38**2  # over d: the random-walk Metropolis step of Roberts and Rosenthal (2001)
# The step lengths a generation's first step tries, longest first, as shares of that step.
LADDER = (1.0, 0.5, 0.25, 0.125, 0.0625)
GOOD_RATE = 0.2  # the longest step accepted at least this often is taken
RESAMPLE, FIRST_STEP, MORE_STEPS = 0, 1, 2  # stream keys within a generation


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
    return np.concatenate(_in_chunks(run, _simulate_chunk, (simulator,), [points, seeds]))


def _simulate_chunk(simulator: Simulator, points: np.ndarray, seeds: list[int]) -> np.ndarray:
    return np.array([simulator.figures(p, s, None) for p, s in zip(points, seeds, strict=True)])


def _in_chunks(run: MapInOrder, fn: Callable[..., Any], head: tuple, columns: list) -> list:
    """fn(*head, CHUNK rows of each column) over all the rows, spread by `run`, in order."""
    rows = range(0, len(columns[0]), CHUNK)
    return run(fn, [(*head, *(column[i : i + CHUNK] for column in columns)) for i in rows])


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
        columns = [points, figures, distances, lengths, seeds]
        moved = [m for part in _in_chunks(run, _walk_chunk, (self, steps), columns) for m in part]
        points, figures, distances, accepted, simulations = zip(*moved, strict=True)
        return Walked(
            np.array(points),
            np.array(figures),
            np.array(distances),
            np.array(accepted, dtype=int),
            sum(simulations),
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
    steps: int,
    points: np.ndarray,
    figures: np.ndarray,
    distances: np.ndarray,
    lengths: np.ndarray,
    seeds: list[int],
) -> list[tuple[np.ndarray, np.ndarray, float, int, int]]:
    """One unit of work: a few particles' chains (a worker process runs it)."""
    return [
        chain.move(p, f, float(d), float(a), steps, s)
        for p, f, d, a, s in zip(points, figures, distances, lengths, seeds, strict=True)
    ]


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
    rng = stream(seed, 0, 0)
    points = priors.sample(rng, n)
    figures = simulate_all(simulator, run, points, seeds_from(rng, n))
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
    rng = stream(seed, 0, 1)
    runs = simulate_all(
        simulator, run, np.repeat(points[best], r, axis=0), seeds_from(rng, len(best) * r)
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
    rng = stream(*key, RESAMPLE)
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
    first = chain.walk(run, *start, tried, 1, seeds_from(stream(*key, FIRST_STEP), dropped))
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
        seeds_from(stream(*key, MORE_STEPS), dropped),
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


def stream(seed: int, generation: int, part: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(generation, part)))


def seeds_from(rng: np.random.Generator, size: int) -> list[int]:
    """A seed per simulation or chain, from the caller's own stream."""
    return rng.integers(0, 2**32, size=size).tolist()
