"""Parameter uncertainty: the calibration's own fits, bootstrapped.

The draws carry how well the traces pin the parameters. A two-stage
bootstrap: the runs are resampled with replacement within their design
(shape, W, C, b, servers: every draw keeps the loads and shapes the
calibration saw), then the iterations within each drawn run (the unit: an
iteration's calls, its verdicts, its stages, units.py). That is how well the
runs pin a mean; how far a new run strays from it is each model's
run_spread (run_spread.py), which the simulator draws per run. With ONE run
per design the draws hold sampling error alone, and the source says so. The
two stages together slightly overstate the spread when runs differ little.

Each draw refits every parameter the scenario holds, with the model the point
estimate chose: the same latency family (an empirical sample's draw is its
`scale`, the resampled mean over the sample's), the cap where it was found,
decay or constant acceptance, the batched iterations' ratio if fitted, and the
correlation if kept, each model's
slowdown if kept (on the same calls and groups) and run_spread if kept (each
drawn copy of a run a run of its own: copies of one run agree, so the draws
of a spread sit a little below its point estimate, as a bootstrap of a
variance does; a spread measured but kept 0 is drawn from its confidence
distribution instead, run_spread.py), front_share and
duplicate_children if fitted, the stage overhead, the skip share, the [failures] shares,
merge_acceptance where gepa could merge, and the token-count families. A
rollout latency fitted to untimed calls' spans is refitted to the resampled
spans and timed latencies (untimed_latency.py), at the draw's slowdown.
Model choices are not redone per draw (a draw is a scenario of the chosen
model), and no draw is bootstrapped again. What is fixed: the setup,
lm_servers, the cap's place, decay_until, the tokens' reflection input line
and its latency shift, the prices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pxn.acceptance import Acceptance
from pxn.calibrate.traces.acceptance import fit_decay, fit_rho
from pxn.calibrate.traces.acceptance_batched import (
    BATCHED_PRIOR_SEED,
    BatchedFit,
    batched_prior,
    batched_unidentified,
    split_a0,
)
from pxn.calibrate.traces.acceptance_likelihood import step_means
from pxn.calibrate.traces.bookkeeping import share_mle, skip_share
from pxn.calibrate.traces.failures import refit_failures
from pxn.calibrate.traces.fit import censored_params
from pxn.calibrate.traces.merges import merge_rate
from pxn.calibrate.traces.prefix_cache import refit_prefix_seconds
from pxn.calibrate.traces.run_spread import RunSpreadFit, refit_run_spread
from pxn.calibrate.traces.served import latency_sample, served_alone
from pxn.calibrate.traces.slowdown import ROLE_KIND, refit_beta
from pxn.calibrate.traces.tails import TailFit, censor
from pxn.calibrate.traces.units import Calls, Units
from pxn.calibrate.traces.untimed_latency import refit_untimed
from pxn.distribution import Distribution
from pxn.uncertainty import Uncertainty

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration

SEED = 20260801
RUN_SPREAD_SEED = 20261207  # the unsupported spreads' draws: a generator of their own
NO_DECAY_TAU = 1e9  # proposals: a draw whose refitted decay rate is 0 (tau must be finite)
TOKEN_FIELDS = {
    "rollout_input": ("rollout", "tokens_in"),
    "rollout_output": ("rollout", "tokens_out"),
    "reflection_output": ("reflection", "tokens_out"),
}


@dataclass(frozen=True)
class DrawsFit:
    uncertainty: Uncertainty
    runs: int
    units: int
    point: dict[str, float]  # each drawn parameter's point estimate
    spread: dict[str, tuple[float, float]]  # each parameter's central 90% over the draws


def parameter_draws(cal: Calibration, count: int) -> DrawsFit:
    rng = np.random.default_rng(SEED)
    units = cal.units
    draws = tuple(one_draw(cal, units.resample(rng)) for _ in range(count))
    if not cal.acceptance.batched.identified:
        draws = with_batched_prior(draws, cal.acceptance.batched)
    draws = with_unsupported_run_spreads(draws, cal.run_spreads.values())
    point = one_draw(cal, units)
    for fit in cal.run_spreads.values():
        if fit.drawn_from_confidence:  # kept 0, drawn from its interval
            point[f"load.{fit.role}.run_spread"] = fit.chosen
    if not cal.acceptance.batched.identified and draws and "acceptance.batched" in draws[0]:
        point["acceptance.batched"] = cal.scenario.acceptance.batched
    source = (
        f"bootstrap of {units.runs} run(s) and their {len(units.run)} iterations (runs "
        "resampled within their design, then iterations within each), every parameter "
        "refitted with the point estimate's model"
    )
    if len(set(units.design)) == units.runs:  # no setup was run twice
        source += (
            "; from one run the draws hold only its sampling error"
            if units.runs == 1
            else "; from one run per design the draws hold only their sampling error"
        ) + ", not how another run's conditions differ"
    spread = {
        path: tuple(np.percentile([d[path] for d in draws if path in d], [5, 95]).tolist())
        for path in sorted({p for d in draws for p in d})
    }
    return DrawsFit(Uncertainty(source, draws), units.runs, len(units.run), point, spread)


def with_batched_prior(draws: tuple[dict[str, float], ...], fit: BatchedFit):
    """Each draw's batched ratio from its prior, where the traces cannot pin it.

    Traces of one kind of iteration say nothing of the other kind's acceptance, and a
    scenario that kept the ratio at 1 would predict the other kind as if it were
    known. With single iterations only, a draw's ratio scales a0 for batched shapes;
    with batched iterations only, a0 is the batched rate and a single iteration's is a0
    over the ratio (a draw's product stays the batched rate it refitted). Drawn
    from its own generator, so the other parameters' draws do not move.
    """
    rng = np.random.default_rng(BATCHED_PRIOR_SEED)
    ratios = batched_prior(rng, len(draws))
    only_batched = fit.single[1] == 0 and fit.batched[1] > 0
    changed = []
    for draw, ratio in zip(draws, ratios, strict=True):
        a0 = draw.get("acceptance.a0")
        if a0 is None or a0 <= 0:
            changed.append(draw)
            continue
        if only_batched:
            single = min(1.0, a0 / ratio)
            changed.append(draw | {"acceptance.a0": single, "acceptance.batched": a0 / single})
        else:
            changed.append(draw | {"acceptance.batched": min(float(ratio), 1 / a0)})
    return tuple(changed)


def with_unsupported_run_spreads(
    draws: tuple[dict[str, float], ...], fits: Iterable[RunSpreadFit]
) -> tuple[dict[str, float], ...]:
    """Each draw's run_spread from its confidence distribution where the runs measured
    one but the test kept 0 (run_spread.py). Drawn from its own generator, so the other
    parameters' draws do not move."""
    rng = np.random.default_rng(RUN_SPREAD_SEED)
    for fit in fits:
        if fit.drawn_from_confidence and draws:
            spreads = fit.confidence_draws(rng, len(draws))
            path = f"load.{fit.role}.run_spread"
            draws = tuple(d | {path: s} for d, s in zip(draws, spreads, strict=True))
    return draws


def one_draw(cal: Calibration, units: Units) -> dict[str, float]:
    """Every parameter of the calibrated scenario, refitted to these units."""
    scenario, servers = cal.scenario, cal.servers
    draw: dict[str, float] = {}
    betas = {}
    for role, fit in cal.slowdowns.items():
        betas[role] = 0.0
        if fit.chosen > 0:
            calls = units.calls
            rows = fit.calls(calls.kind) & ~calls.censored
            groups = fit.groups(calls.kind, calls.phase)[rows]
            refitted = refit_beta(groups, calls.load[rows], calls.latency[rows], servers)
            betas[role] = fit.chosen if refitted is None else refitted
            draw[f"load.{role}.slowdown"] = betas[role]
    served, _ = served_alone(units.calls, betas, servers, scenario.tokens)
    if cal.untimed is None:
        draw |= _latency("rollout", scenario.rollout, served, cal.rollout.tail, "rollout")
    else:
        observed, timed_out = latency_sample(served, "rollout")
        refitted = refit_untimed(
            scenario.rollout, units.spans, observed, timed_out, servers, betas.get("task", 0.0)
        )
        draw |= {f"rollout.{name}": value for name, value in refitted.items()}
    for phase, latency in scenario.rollout_phases.items():
        draw |= _latency(
            f"rollout.phases.{phase}", latency, served, cal.rollout.tail, "rollout", phase
        )
    draw |= _latency("reflection", scenario.reflection, served, cal.reflection.tail, "reflection")
    for role in ROLE_KIND:
        if scenario.loads.of(role).run_spread > 0:
            draw[f"load.{role}.run_spread"] = refit_run_spread(served, units.design, role)
    draw |= _acceptance(cal, units)
    if units.stages.sum() > 0:
        draw["stage_overhead"] = float(units.gap.sum() / units.stages.sum())
    draw["skip_perfect"] = skip_share(units.tasks.sum(), units.unskipped.sum())
    draw |= refit_failures(scenario.failures, units.losses)
    if scenario.front_share < 1:
        informative = units.parents.informative()
        if len(informative.drawn):
            draw["front_share"] = share_mle(informative)[0]
    if scenario.duplicate_children > 0 and units.later.sum() > 0:
        draw["duplicate_children"] = min(float(units.dropped.sum() / units.later.sum()), 0.99)
    if scenario.merge_acceptance is not None:
        draw["merge_acceptance"] = merge_rate(units.merges.sum(), units.merges_accepted.sum())
    if cal.token_counts is not None:
        draw |= _token_counts(cal, units.calls)
    if scenario.loads.reflection.prefix_seconds > 0:
        draw |= _prefix_seconds(cal, units.calls, betas)
    return draw


def _prefix_seconds(cal: Calibration, calls: Calls, betas: dict[str, float]) -> dict[str, float]:
    """The prefix cache's saving refitted to the resampled reflections, in the units of the
    point fit (served alone, before any shift for b); the point value when a draw cannot
    see the slope."""
    served, _ = served_alone(calls, betas, cal.servers, None)
    rows = served.of("reflection") & ~served.censored
    pairs = list(zip(served.event[rows], served.latency[rows].tolist(), strict=True))
    refitted = refit_prefix_seconds(pairs)
    point = cal.scenario.loads.reflection.prefix_seconds
    return {"load.reflection.prefix_seconds": point if refitted is None else refitted}


def _latency(
    path: str,
    point: Distribution,
    served: Calls,
    tail: TailFit,
    kind: str,
    phase: str | None = None,
) -> dict[str, float]:
    observed, timed_out = latency_sample(served, kind, phase)
    return _refit(path, point, observed, timed_out, tail.low if tail.capped else None)


def _refit(
    path: str,
    point: Distribution,
    observed: np.ndarray,
    timed_out: np.ndarray,
    censor_at: float | None,
) -> dict[str, float]:
    """The point distribution's parameters refitted to this sample (none if it is too small).

    An empirical distribution's draw is its scale: the sample's mean (zeros and
    timed-out tries included) over the calibration sample's.
    """
    if point.empirical:
        everything = np.concatenate([observed, timed_out])
        if len(everything) == 0 or np.mean(point.samples) <= 0:
            return {}
        ratio = everything.mean() / np.mean(point.samples)
        return {f"{path}.scale": float(ratio * point.params.get("scale", 1.0))}
    values = observed[observed > 0]
    if len(values) < 2 or np.ptp(values) == 0:
        return {}
    below, censored = values, timed_out
    if censor_at is not None:
        below, censored = censor(values, timed_out, censor_at)
    if len(below) < 2:
        return {}
    with np.errstate(all="ignore"):
        params = censored_params(point.dist, below, censored, start=dict(point.params))
    if not all(np.isfinite(v) and v > 0 for v in params.values()):
        return {}
    return {f"{path}.{name}": value for name, value in params.items()}


def _acceptance(cal: Calibration, units: Units) -> dict[str, float]:
    steps, chosen = units.steps, cal.scenario.acceptance
    if steps.proposals == 0:
        return {}
    rate = 0.0
    if chosen.tau is None:
        refitted = Acceptance(steps.accepted / steps.proposals)
    else:
        a0, rate, _ = fit_decay(steps)
        refitted = Acceptance(a0, 1 / rate if rate > 0 else NO_DECAY_TAU, chosen.decay_until)
    if chosen.batched != 1:
        if batched_unidentified(steps):  # this resample lost one kind: the point's ratio
            ratio = min(chosen.batched, 1 / refitted.a0)
            refitted = replace(refitted, batched=ratio)
        else:
            single, batched = split_a0(steps, rate)
            refitted = replace(refitted, a0=single, batched=batched / single)
    draw = {"acceptance.a0": refitted.a0}
    if refitted.tau is not None:
        draw["acceptance.tau"] = refitted.tau
    if refitted.batched != 1:
        draw["acceptance.batched"] = refitted.batched
    if chosen.correlation > 0:
        draw["acceptance.correlation"] = fit_rho(steps, step_means(steps, refitted))
    return draw


def _token_counts(cal: Calibration, calls: Calls) -> dict[str, float]:
    """The token-count families refitted to the resampled calls' counts (a call cut at a
    timeout has no row of its own: its tries are the rows)."""
    draw = {}
    for name, (kind, column) in TOKEN_FIELDS.items():
        counts = getattr(calls, column)[calls.of(kind) & ~calls.censored]
        fit = getattr(cal.token_counts, name)
        point = getattr(cal.scenario.tokens, name)
        censor_at = fit.tail.low if fit.tail.capped else None
        draw |= _refit(f"tokens.{name}", point, counts[np.isfinite(counts)], np.empty(0), censor_at)
    return draw
