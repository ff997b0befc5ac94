"""Calibrations and inferences as text: printed for a person, and as the written Scenario's
TOML header. A calibration's fitted parts' lines are their modules' (pxn.calibrate.traces); an
inference's from run summaries is reported whole; the quality model's, inferred from traces,
as the calibration report's lines on it."""

from __future__ import annotations

import hashlib
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.calibrate.summaries.abc_smc import Generation
from pxn.calibrate.summaries.facts import Fact
from pxn.calibrate.summaries.infer import (
    NARROWED,
    PINNED,
    PREDICTIVE_RUNS,
    REFLECTION_PROMPT_TOKENS,
    TOKEN_LOG_SD,
    Inference,
)
from pxn.calibrate.traces.acceptance import acceptance_lines
from pxn.calibrate.traces.bookkeeping import bookkeeping_lines, merge_lines
from pxn.calibrate.traces.draws import draws_lines
from pxn.calibrate.traces.failures import failure_lines
from pxn.calibrate.traces.fit import latency_lines
from pxn.calibrate.traces.makespan import rollout_lines
from pxn.calibrate.traces.overhead import concurrency_lines, load_effect_lines, overhead_lines
from pxn.calibrate.traces.phases import phase_lines
from pxn.calibrate.traces.pipeline import Calibration
from pxn.calibrate.traces.prefix_cache import prefix_cache_line
from pxn.calibrate.traces.prompt_lengths import prompt_line
from pxn.calibrate.traces.run_spread import run_spread_line
from pxn.calibrate.traces.tokens import token_lines, tokens_out_lines

if TYPE_CHECKING:
    from pxn.quality import Quality

WIDTH = 100  # columns


def indented(text: str) -> list[str]:
    """A paragraph under a heading line, wrapped within WIDTH."""
    return textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ")


def generation_line(generation: Generation) -> str:
    if generation.number == 0:
        return f"generation 0: {generation.simulations} settings from the prior"
    return (
        f"generation {generation.number}: tolerance {generation.tolerance:.3g}, "
        f"{generation.replaced} took {generation.steps} moves of {generation.step_length:g}, "
        f"{generation.acceptance_rate:.0%} accepted, {generation.simulations} runs, "
        f"{generation.distinct} distinct"
    )


def inference_lines(inference: Inference) -> list[str]:
    """The report, every line within 100 columns (a terminal's, a README's)."""
    summaries, outcome = inference.summaries, inference.outcome
    setup = summaries.setup
    options = summaries.options
    models = [f"task {setup.task_model}"] if setup.task_model else []
    models += [f"reflection {setup.reflection_model}"] if setup.reflection_model else []
    width = max(len(p.path) for p in inference.parameters)
    lines = [
        f"inferred from {summaries.path}",
        f"{len(summaries.facts)} facts on {len(summaries.runs)} runs, each simulated once per "
        "parameter setting",
        f"setup: B={setup.budget}, V={setup.valset_size}, train={setup.trainset_size}, "
        f"b={setup.minibatch}, W={setup.workers}, C={setup.reflection_concurrency}",
        *([f"models: {', '.join(models)}"] if models else []),
        f"ABC-SMC (MCMC moves): {options.particles} particles, seed {options.seed}, "
        f"{len(outcome.history) - 1} generations, {outcome.simulations} simulated runs",
        f"converged: {outcome.verdict}",
        *indented(
            "distance: each fact's miss in units of one run's sd of it (the pilot's "
            f"{outcome.scale.simulations} runs of the prior's best fits) or of its reporting "
            f"precision; noise level {outcome.scale.noise_level:.3g}"
        ),
        *(f"  {generation_line(g)}" for g in outcome.history),
        "",
        "priors:",
        *(f"  {p.path:<{width}}  {p.prior.describe()}" for p in inference.parameters),
    ]
    lines += parameter_lines(inference)
    draws = len(inference.scenario.uncertainty.draws) if inference.scenario.uncertainty else 0
    lines += [
        "",
        f"facts against the posterior predictive ({draws} posterior draws, "
        f"{PREDICTIVE_RUNS} runs each): median [5%, 95%];",
        "one run's noise: the 5-95% of a single run about the reported value, were that its mean",
    ]
    width = max(len(c.fact.label) for c in inference.checks)
    for check in inference.checks:
        fact = check.fact
        noise = (
            f"[{fact.shown(check.noise_low)}, {fact.shown(check.noise_high)}]"
            if math.isfinite(check.noise_high)
            else f">= {fact.shown(check.noise_low)}"
        )
        ranged = f"; {check.share_inside:.0%} of runs in the range" if fact.ranged else ""
        lines += [
            f"  {fact.label:<{width}}  reported {reported(fact):<7} predicted "
            f"{fact.shown(check.median)} [{fact.shown(check.low)}, {fact.shown(check.high)}]  "
            + ("inside" if check.inside else "OUTSIDE"),
            f"  {'':<{width}}  one run's noise {noise}{ranged}",
        ]
    return lines


def parameter_lines(inference: Inference) -> list[str]:
    """Each inferred parameter's posterior, and those held fixed."""
    width = max(len(p.path) for p in inference.parameters)
    lines = textwrap.wrap(
        "parameters: posterior median [5%, 95%], IQR ratio (posterior / prior "
        f"interquartile range on the prior's scale: pinned <= {PINNED}, narrowed <= "
        f"{NARROWED}, else left to the prior)",
        WIDTH,
    )
    for p in inference.parameters:
        interval = f"[{p.low:.4g}, {p.high:.4g}]"
        lines.append(
            f"  {p.path:<{width}}  {p.median:9.4g} {interval:<18}  {p.iqr_ratio:.2f}  {p.verdict}"
        )
    for path, value in inference.priors.fixed.items():
        lines.append(f"  {path:<{width}}  {value:9.4g} held fixed")
    return lines


def reported(fact: Fact) -> str:
    """The reported figure as the file wrote it, but a share as the prediction beside it is
    shown: 17%, not 0.17."""
    if fact.quantity != "full_val_share":
        return fact.reported
    if fact.ranged:
        return f"{fact.shown(fact.low)}-{fact.shown(fact.high)}"
    return fact.shown(fact.low)


def assumptions(inference: Inference) -> list[str]:
    if inference.scenario.quality is None:
        lines = [
            "Latencies lognormal and independent call to call; constant acceptance a0 with",
            "correlation between siblings of an iteration; no engine overhead, no skipped",
            "perfect parents, gepa's default selection (every improving child).",
        ]
    else:
        lines = [
            "Latencies lognormal and independent call to call; the search as the quality",
            "model runs it (examples of spread difficulty, a child's change drawn around its",
            "parent's, a finite ceiling, perfect minibatches skipped); no engine overhead,",
            "gepa's default selection (every improving child).",
        ]
    if inference.scenario.tokens is not None:
        lines += [
            f"Tokens per call lognormal with log-sd {TOKEN_LOG_SD}; a reflection reads "
            f"{REFLECTION_PROMPT_TOKENS:.0f} tokens",
            "plus its per-example input times b; prices from litellm's table.",
        ]
    return lines


def inference_header(inference: Inference, intro: str = "") -> str:
    """The written scenario's header: where it came from and how far to trust it."""
    parts = [intro] if intro else []
    parts += [
        f"Inferred by simulation-based inference (ABC-SMC) from {inference.summaries.path.name}.",
        "Its [uncertainty] draws are the posterior; the values above them are the",
        "posterior medians.",
        "",
        *assumptions(inference),
        "",
        *inference_lines(inference)[2:],
    ]
    return "\n".join(parts)


def quality_lines(cal: Calibration) -> list[str]:
    """The search's quality model, when it decides acceptance: how it was inferred from the
    runs' scores, its posterior, and how many of the runs' figures its predictive holds."""
    fit = cal.quality
    if fit is None:
        return []
    inference, q = fit.inference, fit.quality
    outcome = inference.outcome
    inside = sum(check.inside for check in inference.checks)
    metric = f"graded, {q.levels} levels" if q.metric == "graded" else q.metric
    return [
        f"search: the quality model decides acceptance (the rates above are kept in the "
        f"report only); metric {metric}, read off the scores",
        *indented(
            f"inferred from {len(inference.summaries.facts)} figures of "
            f"{len(inference.summaries.runs)} run(s) (seed and best scores, acceptance, skips, "
            "validation gain over the parent, examples' spread, repeated evaluations' "
            f"agreement) by ABC-SMC: {len(outcome.history) - 1} generations, "
            f"{outcome.simulations} simulated runs, {outcome.verdict}"
        ),
        *(f"  {line}" for line in parameter_lines(inference)),
        f"  the runs' figures inside their posterior predictive 5-95%: {inside} of "
        f"{len(inference.checks)}",
        *(
            indented(
                f"{fit.no_headroom} of {len(fit.draws)} posterior draws put the ceiling at "
                "or below the seed's score: the point's medians taken from the rest, as the "
                "runs found headroom; the draws keep them (on noisy scores a search that "
                "changes nothing still accepts proposals, and a next run may find nothing)"
            )
            if fit.no_headroom
            else []
        ),
        seed_validation_line(q),
    ]


def seed_validation_line(q: Quality) -> str:
    """Whether runs predicted from the scenario start from the seed as measured."""
    if not q.seed_validation:
        return (
            "  seed validation: not kept, the runs measured it differently (other valsets, noise)"
        )
    mean = sum(q.seed_validation) / len(q.seed_validation)
    return (
        f"  seed validation: kept as every run measured it ({mean:.3g} over "
        f"{len(q.seed_validation)} examples) -> [quality] seed_validation"
    )


def _digest(path: Path) -> str:
    """The start of the trace's SHA-256: which bytes this scenario came from."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "unreadable"


def calibration_lines(cal: Calibration) -> list[str]:
    lines = trace_lines(cal)
    lines.extend(setup_lines(cal))
    lines.extend(rollout_lines(cal))
    lines.extend(phase_lines(cal))
    lines.append(prompt_line(cal))
    lines.extend(latency_lines(cal.reflection))
    lines.extend(tokens_out_lines(cal))
    lines.extend(token_lines(cal))
    lines.extend(acceptance_lines(cal))
    lines.extend(quality_lines(cal))
    lines.append(cal.skip.line())
    lines.extend(failure_lines(cal))
    lines.extend(overhead_lines(cal))
    lines.extend(concurrency_lines(cal))
    lines.extend(load_effect_lines(cal))
    lines.extend(load_lines(cal))
    lines.extend(bookkeeping_lines(cal))
    lines.extend(merge_lines(cal))
    lines.extend(draws_lines(cal))
    lines.extend(f"note: {note}" for note in cal.notes)
    return lines


def trace_lines(cal: Calibration) -> list[str]:
    """The traces read (each with its digest), those set aside, and the lines skipped."""
    loaded = cal.loaded
    lines = [f"calibrated from {len(cal.traces)} trace(s):"]
    for trace in cal.traces:
        start = trace.run_start
        lines.append(
            f"  {trace.path} (sha256 {_digest(trace.path)}): {start.source}, shape "
            f"{start.shape}, W={start.workers}, "
            f"B={start.budget}, {len(trace.events)} events"
            + (f", {len(trace.skipped)} line(s) skipped" if trace.skipped else "")
        )
    for reason in loaded.rejected:
        lines.append(f"  set aside: {reason}")
    skipped = loaded.skipped_lines
    if skipped:
        lines.append(f"skipped {len(skipped)} unusable line(s):")
        lines.extend(f"  {line}" for line in skipped[:10])
        if len(skipped) > 10:
            lines.append(f"  ... and {len(skipped) - 10} more")
    return lines


def setup_lines(cal: Calibration) -> list[str]:
    """The runs' setup, and how long a run the traces saw ([calibrated_on])."""
    s = cal.scenario
    lines = [
        f"setup: B={s.budget}, V={s.valset_size}, train={s.trainset_size}, "
        f"b={s.minibatch}, W={s.workers}, C={s.reflection_concurrency}, "
        f"selection={s.selection}"
    ]
    seen = s.calibrated_on
    if seen is not None:
        lines.append(
            f"calibrated on: the longest of {seen.runs} run(s) made {seen.metric_calls} metric "
            f"calls and {seen.proposals} proposals ([calibrated_on]); a prediction for a longer "
            "run extrapolates, and its report says by how much"
        )
    return lines


def load_lines(cal: Calibration) -> list[str]:
    """The LM pool; each model's load slowdown and run spread; the reflections' prefix cache."""
    s = cal.scenario
    servers = cal.servers
    pool = (
        f"lm_servers={servers} ({cal.lm_servers_source})"
        if servers is not None
        else "lm_servers unknown (no limit; pass --lm-servers K for a local pool)"
    )
    lines = [f"LM pool: {pool}"]
    for role, model in cal.slowdowns.items():
        lines.extend(model.lines(role, s.loads.of(role).slowdown))
        lines.append(run_spread_line(cal.run_spreads[role]))
    if servers is not None:
        lines.append(
            f"  fitted only on calls that started with at most {servers} in flight: a later "
            "one may have waited for a server, and that wait is not a slowdown"
        )
    lines.append(prefix_cache_line(cal))
    return lines


def calibration_header(cal: Calibration, first: Sequence[str] = ()) -> str:
    """The scenario file's header: `first` (whether it reproduces its runs), then the report."""
    title = f"Calibrated scenario '{cal.scenario.name}', written by pxn calibrate."
    return "\n".join([title, "", *first, *calibration_lines(cal)])
