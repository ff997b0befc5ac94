"""Run summaries -> a Scenario with its uncertainty, by simulation-based inference.

The simulator is the likelihood (abc_smc.py): per setting, every run the facts read is
simulated once, in the listed order so that a setting whose first runs miss already
stops, a sweep's runs being the same runs its facts read. The model's assumptions
(lognormal latencies, constant acceptance with a sibling correlation, no overhead or
skips, lognormal tokens with TOKEN_LOG_SD and a reflection prompt of
REFLECTION_PROMPT_TOKENS) are docs/calibration.md's "The model the facts are read through".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special
import scipy.stats

from pxn.acceptance import Acceptance
from pxn.calibrate.summaries.abc_smc import (
    AbcSmcResult,
    Cutoff,
    Generation,
    MapInOrder,
    Settings,
    abc_smc,
    seeds_from,
    simulate_all,
    stream,
)
from pxn.calibrate.summaries.facts import Fact, Setup, Summaries
from pxn.calibrate.summaries.priors import (
    DEFAULT_PRIORS,
    QUALITY_PRIORS,
    TOKEN_PRIORS,
    Prior,
    Priors,
)
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.prices import Prices
from pxn.quality import Quality
from pxn.scenario import Scenario, Uncertainty
from pxn.shape import Shape
from pxn.sim.backends import Backend, LocalBackend, gather
from pxn.sim.model import simulate_once
from pxn.tokens import Tokens

TOKEN_LOG_SD = 0.5
REFLECTION_PROMPT_TOKENS = 1000.0  # the reflection template and the candidate's text
PINNED, NARROWED = 0.5, 0.8  # posterior IQR over prior IQR at or below which
PREDICTIVE = 10_000  # the stream key of the posterior predictive's seeds (past any generation)
PREDICTIVE_RUNS = 2  # per posterior draw, for the facts' check
SHARE_CLIP = 1e-4  # a share of 0 or 1 read on the logit scale as this close to it
NORMAL_90 = scipy.stats.norm.ppf(0.95)  # a normal's 5-95% reaches this many sds either side
PREDICTIVE_FLOOR = 0.5  # of the facts a posterior's predictive must hold in its 5-95%


@dataclass(frozen=True)
class RunModel:
    """What one parameter setting's runs are simulated from; picklable, for the workers."""

    bases: tuple[Scenario, ...]  # one per distinct setup
    runs: tuple[tuple[int, Shape], ...]  # (index into bases, shape), in the Summaries' order
    facts: tuple[Fact, ...]
    priors: Priors

    def figures(self, point: np.ndarray, seed: int, cutoff: Cutoff | None = None) -> np.ndarray:
        """Every fact's figure, on its scale, in one simulation of the runs at this
        working-space point.

        With a cutoff, the runs stop once the facts they have read put the setting
        beyond it (the facts no run has read yet are NaN): it cannot be kept.
        """
        figures = np.full(len(self.facts), math.nan)
        values = self.priors.values(point)
        try:
            # scipy overflows computing the moments of a far-out draw; validation judges it.
            with np.errstate(over="ignore", invalid="ignore"):
                scenarios = [b.with_parameters(values).replace(seed=seed) for b in self.bases]
        except PxnError:  # a setting no scenario can have is no candidate
            return figures
        summaries = []
        test_sets = np.random.default_rng(seed)  # a test score's sampling of its examples
        for i, (s, shape) in enumerate(self.runs):
            summaries.append(simulate_once(scenarios[s], shape, i))
            for j, fact in enumerate(self.facts):
                if max(fact.runs) == i:
                    figures[j] = on_scale(fact, fact.measure(summaries, test_sets))
            if cutoff is not None and cutoff.exceeded(figures):
                break
        return figures


def spread_over(backend: Backend) -> MapInOrder:
    """Units of work spread over a backend (opened and closed by the caller), in order."""
    return functools.partial(gather, backend)


def simulate_points(
    model: RunModel, points: np.ndarray, seeds: list[int], backend: Backend
) -> np.ndarray:
    """Figures, on their scales, of many settings, in the settings' order."""
    return simulate_all(model, spread_over(backend), points, seeds)


def on_scale(fact: Fact, values: np.ndarray | float) -> np.ndarray:
    """Figures on the scale a fact's misfit is measured on (summaries.SCALES)."""
    values = np.asarray(values, dtype=float)
    if fact.scale == "logit":
        return scipy.special.logit(np.clip(values, SHARE_CLIP, 1 - SHARE_CLIP))
    if fact.scale == "log1p":
        return np.log1p(values)
    if fact.scale == "linear":
        return values
    with np.errstate(divide="ignore"):
        return np.log(values)


def precision_on_scale(fact: Fact) -> float:
    """A fact's reporting precision on its scale: the widest half-unit step at its ends."""
    ends = [e for e in (fact.low, fact.high) if math.isfinite(e)]
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = [on_scale(fact, e + fact.precision) - on_scale(fact, e) for e in ends]
    return max((float(s) for s in steps if np.isfinite(s)), default=0.0)


def from_scale(fact: Fact, values: np.ndarray | float) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if fact.scale == "logit":
        return scipy.special.expit(values)
    if fact.scale == "linear":
        return values
    return np.expm1(values) if fact.scale == "log1p" else np.exp(values)


@dataclass(frozen=True)
class ParameterPosterior:
    path: str
    prior: Prior
    median: float
    low: float  # 5%
    high: float  # 95%
    iqr_ratio: float  # posterior IQR over prior IQR, on the prior's working scale

    @property
    def verdict(self) -> str:
        if self.iqr_ratio <= PINNED:
            return "pinned"
        return "narrowed" if self.iqr_ratio <= NARROWED else "left to the prior"


@dataclass(frozen=True)
class FactCheck:
    """A fact against the posterior predictive: runs simulated at posterior draws."""

    fact: Fact
    median: float
    low: float  # 5%
    high: float  # 95%
    share_inside: float  # of predictive runs whose figure is in the fact's [low, high]
    inside: bool  # the reported value (a range: some of it) is in the 5-95% predictive interval
    noise_low: float  # one run's 5-95% about the reported value (a range: about its ends)
    noise_high: float


@dataclass(frozen=True)
class Inference:
    summaries: Summaries
    priors: Priors
    outcome: AbcSmcResult
    parameters: tuple[ParameterPosterior, ...]
    checks: tuple[FactCheck, ...]
    scenario: Scenario


def base_scenario(setup: Setup, name: str, scored: bool = False) -> Scenario:
    """The setup as a scenario, its parameters at placeholders every inference replaces:
    with `scored` facts, its search is the quality model, else acceptance rates."""

    def lognormal(s: float, scale: float) -> Distribution:
        return Distribution("lognorm", {"s": s, "scale": scale})

    tokens = prices = None
    if setup.priced:
        tokens = Tokens(
            rollout_input=lognormal(TOKEN_LOG_SD, 1000.0),
            rollout_output=lognormal(TOKEN_LOG_SD, 300.0),
            reflection_output=lognormal(TOKEN_LOG_SD, 2000.0),
            reflection_input_base=REFLECTION_PROMPT_TOKENS,
            reflection_input_per_example=1000.0,
            measured_minibatch=setup.minibatch,
        )
        prices = Prices.from_dict(
            {"task_model": setup.task_model, "reflection_model": setup.reflection_model}
            if setup.reflection_model
            else {"task_model": setup.task_model}
        )
    return Scenario(
        name=name,
        budget=setup.budget,
        valset_size=setup.valset_size,
        trainset_size=setup.trainset_size,
        workers=setup.workers,
        minibatch=setup.minibatch,
        reflection_concurrency=setup.reflection_concurrency,
        rollout=lognormal(1.0, 10.0),
        reflection=lognormal(0.5, 10.0),
        acceptance=None if scored else Acceptance(0.2),
        quality=Quality(0.5, metric=setup.metric, levels=setup.levels) if scored else None,
        tokens=tokens,
        prices=prices,
        prompt=setup.prompt,
    ).validate()


def priors_for(summaries: Summaries, base: Scenario) -> Priors:
    """The default priors, the file's own over them; each checked against the scenario."""
    chosen: dict[str, Prior | float] = dict(DEFAULT_PRIORS)
    if summaries.scored:  # the quality model decides acceptance
        chosen = {p: v for p, v in chosen.items() if not p.startswith("acceptance.")}
        chosen |= QUALITY_PRIORS
    if summaries.has_dollars:
        chosen |= TOKEN_PRIORS
    chosen |= summaries.priors
    fixed = {path: value for path, value in chosen.items() if not isinstance(value, Prior)}
    inferred = {path: p for path, p in chosen.items() if isinstance(p, Prior)}
    for path, prior in inferred.items():
        ends = (prior.a,) if prior.kind == "lognormal" else (prior.a, prior.b)
        for value in ends:
            _check_parameter(base, fixed | {path: value}, f"prior of {path!r}")
    _check_parameter(base, fixed, "[priors]")
    return Priors(tuple(inferred), tuple(inferred.values()), fixed)


def _check_parameter(base: Scenario, values: dict[str, float], what: str) -> None:
    try:
        base.with_parameters(values).validate()
    except PxnError as exc:
        raise PxnError(f"gives a scenario where {exc}", subject=what) from None
    except (TypeError, AttributeError):  # a path into a table the scenario does not have
        names = ", ".join(values)
        raise PxnError(f"names no parameter of this scenario ({names})", subject=what) from None


def run_model(summaries: Summaries, name: str) -> RunModel:
    """The summaries' runs and facts as the simulator reads them, under their priors."""
    setups = list(dict.fromkeys(run.setup for run in summaries.runs))
    bases = tuple(base_scenario(setup, name, summaries.scored) for setup in setups)
    return RunModel(
        bases,
        tuple((setups.index(run.setup), run.shape) for run in summaries.runs),
        summaries.facts,
        priors_for(summaries, bases[0]),
    )


def infer_from_summaries(
    summaries: Summaries,
    name: str,
    jobs: int = 1,
    on_generation: Callable[[Generation], None] | None = None,
    backend: Backend | None = None,
) -> Inference:
    """The posterior over the scenario's parameters given the summaries' facts, its
    simulations on `backend` (opened and closed by the caller), else on `jobs` local
    processes: the same to the bit either way.

    Raises PxnError, writing nothing, when no setting within the priors
    reproduces the facts together, or when the sampler did not converge.
    """
    model = run_model(summaries, name)
    priors, bases, facts = model.priors, model.bases, summaries.facts
    low = np.array([on_scale(f, f.low) for f in facts])
    high = np.array([on_scale(f, f.high) for f in facts])
    precision = np.array([precision_on_scale(f) for f in facts])

    options = summaries.options
    settings = Settings(
        particles=options.particles,
        min_acceptance=options.min_acceptance,
        max_generations=options.max_generations,
    )
    backend = backend or LocalBackend(jobs)
    outcome = abc_smc(
        priors, model, spread_over(backend), low, high, precision, settings, options.seed,
        on_generation,
    )  # fmt: skip
    _refuse_unreproduced(outcome, facts, low, high)
    if not outcome.converged:
        raise PxnError(
            f"the inference did not converge: {outcome.verdict} "
            "(more [inference] particles, a lower min_acceptance or narrower priors may help)"
        )
    draws = _resample(outcome, options.draws, options.seed)
    # Replicate r on draw r mod D, as a prediction runs them: each draw twice.
    runs = np.resize(draws, (PREDICTIVE_RUNS * len(draws), draws.shape[1]))
    seeds = seeds_from(stream(options.seed, PREDICTIVE, 1), len(runs))
    predictive = simulate_points(model, runs, seeds, backend)
    parameters = tuple(_posterior(outcome, priors, i) for i in range(len(priors)))
    checks = tuple(
        _check_fact(f, predictive[:, j], outcome.scale.noise[j]) for j, f in enumerate(facts)
    )
    _refuse_unpredicted(checks)
    point = np.array([priors.priors[i].to_working(p.median) for i, p in enumerate(parameters)])
    source = (
        f"ABC-SMC posterior from {summaries.path.name}: {len(draws)} draws of "
        f"{options.particles} particles after {len(outcome.history) - 1} generations and "
        f"{outcome.simulations} simulations (seed {options.seed})"
    )
    rows = tuple(
        {path: float(f"{p.from_working(z):.6g}") for (path, p), z in zip(priors, d, strict=True)}
        for d in draws
    )  # each value to 6 significant digits
    uncertainty = Uncertainty(source, rows)
    scenario = (
        bases[0]
        .with_parameters(priors.values(point))
        .replace(uncertainty=uncertainty, calibrated_on=summaries.calibrated_on())
    )
    scenario.validate_draws()
    return Inference(summaries, priors, outcome, parameters, checks, scenario)


def _refuse_unreproduced(
    outcome: AbcSmcResult, facts: tuple[Fact, ...], low: np.ndarray, high: np.ndarray
) -> None:
    """Refuse facts that no kept run came within one unit of: the priors hold no setting
    for them. Nearer, a fact is a miss for the predictive check, not an impossibility: it
    is one run's figure, and a run in a tail lies past what a few hundred runs reach."""
    figures = outcome.population.figures
    missed = []
    for j, fact in enumerate(facts):
        column = figures[:, j][np.isfinite(figures[:, j])]
        unit = outcome.scale.units[j]
        reach_low, reach_high = low[j] - unit, high[j] + unit
        if column.size and column.min() <= reach_high and column.max() >= reach_low:
            continue
        if column.size:
            nearest = column[np.argmin(np.abs(np.clip(column, low[j], high[j]) - column))]
            missed.append(
                f"{fact.label} {fact.reported} (closest: {fact.shown(from_scale(fact, nearest))})"
            )
        else:
            missed.append(f"{fact.label} {fact.reported} (no run could be simulated)")
    if missed:
        raise PxnError(
            "no parameter setting within the priors reproduces these facts together: "
            + "; ".join(missed)
            + f" (of {len(figures)} best-fitting simulated runs)"
        )


def _refuse_unpredicted(checks: tuple[FactCheck, ...]) -> None:
    """Refuse a posterior whose predictive holds fewer than half the facts in its 5-95%: a
    right model misses one in ten, so such a posterior does not describe the runs."""
    inside = sum(check.inside for check in checks)
    if inside >= PREDICTIVE_FLOOR * len(checks):
        return
    missed = [f"{c.fact.label} {c.fact.reported} ({_predicted(c)})" for c in checks if not c.inside]
    raise PxnError(
        f"the posterior predictive holds only {inside} of the {len(checks)} facts in its "
        f"5-95%: the model cannot reproduce the runs it was fitted to ({'; '.join(missed[:4])})"
    )


def _predicted(check: FactCheck) -> str:
    if math.isnan(check.median):
        return "no simulated run has the figure"
    return f"predicted {check.low:.3g}-{check.high:.3g}"


def _resample(outcome: AbcSmcResult, draws: int, seed: int) -> np.ndarray:
    """`draws` of the equally weighted particles (all of them, in turn, when draws exceed them)."""
    points = outcome.population.points
    order = stream(seed, PREDICTIVE, 0).permutation(len(points))
    return points[np.resize(order, draws)]


def _posterior(outcome: AbcSmcResult, priors: Priors, i: int) -> ParameterPosterior:
    prior = priors.priors[i]
    q = outcome.population.quantiles(i, [0.05, 0.25, 0.5, 0.75, 0.95])
    low, median, high = (float(prior.from_working(v)) for v in (q[0], q[2], q[4]))
    return ParameterPosterior(
        priors.paths[i], prior, median, low, high, float((q[3] - q[1]) / prior.working_iqr())
    )


def _check_fact(fact: Fact, figures: np.ndarray, noise: float) -> FactCheck:
    """The fact against predictive figures on its scale, and one run's noise about it. A
    figure no predictive run has (acceptance where every simulated run lost its proposals)
    is outside: its quantiles are NaN."""
    finite = figures[np.isfinite(figures)]
    low, high = on_scale(fact, fact.low), on_scale(fact, fact.high)
    reach = NORMAL_90 * noise
    noise_low = float(from_scale(fact, low - reach))
    noise_high = float(from_scale(fact, high + reach))
    if not finite.size:
        return FactCheck(fact, math.nan, math.nan, math.nan, 0.0, False, noise_low, noise_high)
    on = np.percentile(finite, [5, 50, 95])  # compared on the scale: a share clipped stays in
    quantiles = from_scale(fact, on)
    share = float(np.mean((finite >= low) & (finite <= high)))
    return FactCheck(
        fact, float(quantiles[1]), float(quantiles[0]), float(quantiles[2]), share,
        bool(on[0] <= high and low <= on[2]), noise_low, noise_high,
    )  # fmt: skip
