"""Parameter uncertainty: the calibration's own fits, bootstrapped.

The draws carry how well the traces pin the parameters. A two-stage bootstrap: the runs
are resampled with replacement within their design (shape, W, C, b, servers: every draw
keeps the loads and shapes the calibration saw), then the iterations within each drawn run
(the unit, units.py). That is how well the runs pin a mean; how far a new run strays from
it is each model's run_spread (run_spread.py), which the simulator draws per run. With ONE
run per design the draws hold sampling error alone, and the source says so. The two stages
together slightly overstate the spread when runs differ little.

Each draw refits every parameter the scenario holds with the model the point estimate
chose, one refit per part (REFITS; an empirical latency's draw is its `scale`). Copies of
one run agree, so a drawn run spread sits a little below its point estimate, as a
bootstrap of a variance does; a spread measured but kept 0 is drawn from its confidence
distribution instead (run_spread.py). Model choices are not redone per draw (a draw is a
scenario of the chosen model), and no draw is bootstrapped again. What is fixed: the
setup, lm_servers, the cap's place, decay_until, the tokens' reflection input line and its
latency shift, the prices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pxn.calibrate.traces.acceptance import (
    BATCHED_PRIOR_SEED,
    BatchedFit,
    batched_prior,
    draw_acceptance,
)
from pxn.calibrate.traces.bookkeeping import (
    draw_duplicates,
    draw_front_share,
    draw_merge_acceptance,
    draw_skip,
)
from pxn.calibrate.traces.failures import draw_failures
from pxn.calibrate.traces.fit import draw_reflection
from pxn.calibrate.traces.makespan import draw_rollout
from pxn.calibrate.traces.overhead import draw_stage_overhead
from pxn.calibrate.traces.phases import draw_rollout_phases
from pxn.calibrate.traces.prefix_cache import draw_prefix_seconds
from pxn.calibrate.traces.prompt_lengths import refit_exponent
from pxn.calibrate.traces.run_spread import RunSpreadFit, draw_run_spreads
from pxn.calibrate.traces.slowdown import draw_slowdowns, served_alone
from pxn.calibrate.traces.tokens import draw_token_counts
from pxn.calibrate.traces.units import Calls, Units
from pxn.scenario import Uncertainty

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration
    from pxn.scenario import Scenario


@dataclass(frozen=True)
class Resample:
    """One bootstrap resample as every part's refit reads it: the calibration whose models
    the refits keep, the resampled units, each model's slowdown refitted to them, and the
    calls as the simulator draws them at those slowdowns."""

    calibration: Calibration
    units: Units
    betas: dict[str, float]  # each model's load slowdown, refitted (0 where none was kept)
    served: Calls  # the resampled calls served alone, at `betas`

    @property
    def scenario(self) -> Scenario:
        """The point estimate: the model each refit keeps."""
        return self.calibration.scenario


SEED = 20260801
RUN_SPREAD_SEED = 20261207  # the unsupported spreads' draws: a generator of their own
# Every part's refit but the slowdowns', in the order a draw's parameters are written.
REFITS: tuple[Callable[[Resample], dict[str, float]], ...] = (
    draw_rollout,
    draw_rollout_phases,
    draw_reflection,
    draw_run_spreads,
    draw_acceptance,
    draw_stage_overhead,
    draw_skip,
    draw_failures,
    draw_front_share,
    draw_duplicates,
    draw_merge_acceptance,
    draw_token_counts,
    draw_prefix_seconds,
)


@dataclass(frozen=True)
class DrawsFit:
    uncertainty: Uncertainty
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
        if fit.drawn_though_kept_0:
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
    return DrawsFit(Uncertainty(source, draws), point, spread)


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
    """Each draw's run_spread where it was kept 0: from its confidence distribution where
    the runs measured one but the test kept 0, from the prior where no setup was run twice
    (run_spread.py). Drawn from its own generator, so the other parameters' draws do not
    move."""
    rng = np.random.default_rng(RUN_SPREAD_SEED)
    for fit in fits:
        if fit.drawn_though_kept_0 and draws:
            spreads = fit.unsupported_draws(rng, len(draws))
            path = f"load.{fit.role}.run_spread"
            draws = tuple(d | {path: s} for d, s in zip(draws, spreads, strict=True))
    return draws


def one_draw(cal: Calibration, units: Units) -> dict[str, float]:
    """Every parameter of the calibrated scenario, refitted to these units: each model's
    slowdown first, then the prompt's exponent at those, then every part's refit on the
    calls served alone at both."""
    betas = draw_slowdowns(cal, units)
    draw = {f"load.{role}.slowdown": betas[role] for role, fit in cal.slowdowns.items()
            if fit.chosen > 0}  # fmt: skip
    exponent = None
    if cal.prompt.chosen is not None:
        load_only, _ = served_alone(units.calls, betas, cal.servers, None)
        exponent = draw["prompt.exponent"] = refit_exponent(cal.prompt, load_only)
    factor = cal.prompt.factors(units.calls, exponent)
    served, _ = served_alone(units.calls, betas, cal.servers, cal.scenario.tokens, factor)
    resample = Resample(cal, units, betas, served)
    for refit in REFITS:
        draw |= refit(resample)
    return draw


def draws_lines(cal: Calibration) -> list[str]:
    """The [uncertainty] draws: how they were made and how far each parameter spreads."""
    draws = cal.draws
    if draws is None:
        return ["parameter uncertainty: none drawn (--draws N writes an [uncertainty] table)"]
    count, source = len(draws.uncertainty), draws.uncertainty.source
    lines = [f"parameter uncertainty: {count} parameter draws, {source}"]
    for path, (low, high) in draws.spread.items():
        point = draws.point.get(path, math.nan)
        lines.append(f"  {path}: {point:.4g}, 90% of draws in [{low:.4g}, {high:.4g}]")
    return lines
