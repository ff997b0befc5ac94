"""The calibration as text: printed for a person, and as the Scenario's TOML header; the
lines on gepa's search are search_calibration_report.py's."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path

from pxn.api.search_calibration_report import (
    acceptance_lines,
    bookkeeping_lines,
    merge_lines,
    quality_lines,
)
from pxn.calibrate.traces.fit import LatencyFit
from pxn.calibrate.traces.pipeline import Calibration
from pxn.calibrate.traces.run_spread import RunSpreadFit
from pxn.distribution import Distribution


def _digest(path: Path) -> str:
    """The start of the trace's SHA-256: which bytes this scenario came from."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "unreadable"


def describe_latency(latency: Distribution) -> str:
    if latency.dist == "empirical":
        return f"empirical bootstrap of {len(latency.samples)} samples"
    params = ", ".join(f"{k}={v:.4g}" for k, v in latency.params.items())
    return f"{latency.dist}({params})"


def latency_lines(fit: LatencyFit, quantity: str = "latency", unit: str = "s") -> list[str]:
    """A fit's lines; token counts are fitted the same way (quantity "tokens", unit "tok")."""
    low, high = fit.mean_ci
    mlow, mhigh = fit.median_ci
    lines = [
        f"{fit.what} {quantity}: n={fit.n}, mean {fit.mean:.4g} {unit} "
        f"[95% {low:.4g}, {high:.4g}], median {fit.median:.4g} {unit} [{mlow:.4g}, {mhigh:.4g}]"
        + (f", {fit.dropped} non-positive set aside" if fit.dropped else ""),
        f"  chosen: {describe_latency(fit.chosen)} ({fit.reason})",
    ]
    if fit.param_ci:
        cis = ", ".join(f"{k} in [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in fit.param_ci.items())
        lines.append(f"  95% bootstrap intervals: {cis}")
    tail = fit.tail
    if tail.capped:
        retries = f", cap_retries={tail.cap_retries}" if tail.cap_retries else ""
        lines.append(
            f"  tail: {tail.reason}: fitted with those right-censored -> cap={tail.cap:.4g}"
            f"{retries}" + (" (a lower bound on the client's retries)" if tail.cap_retries else "")
        )
    elif tail.n:
        lines.append(f"  tail: {tail.reason}")
    if fit.relative_uncertainty > 0.2:
        lines.append(
            f"  uncertain: the mean is known to +-{fit.relative_uncertainty:.0%} only; "
            "more runs would narrow it"
        )
    for f in fit.fits:
        params = ", ".join(f"{k}={v:.4g}" for k, v in f.params.items())
        lines.append(
            f"  {f.family:<11} AIC {f.aic:10.1f}  KS D={f.ks_statistic:.3f} "
            f"p={f.ks_pvalue:.2g}  mean {f.mean:.4g} {unit}  ({params})"
        )
    return lines


def calibration_lines(cal: Calibration) -> list[str]:
    lines = trace_lines(cal)
    lines.extend(setup_lines(cal))
    lines.extend(rollout_lines(cal))
    lines.extend(phase_lines(cal))
    lines.extend(latency_lines(cal.reflection))
    lines.extend(tokens_out_lines(cal))
    lines.extend(token_lines(cal))
    lines.extend(acceptance_lines(cal))
    lines.extend(quality_lines(cal))
    k = cal.skip
    lines.append(
        f"perfect-parent skips: {k.tasks - k.reflected} of {k.tasks} tasks -> "
        f"skip_perfect={k.probability:.3f}"
    )
    lines.extend(failure_lines(cal))
    lines.extend(overhead_lines(cal))
    lines.extend(concurrency_lines(cal))
    lines.extend(load_effect_lines(cal))
    lines.extend(slowdown_lines(cal))
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


def tokens_out_lines(cal: Calibration) -> list[str]:
    """Latency against the tokens a call wrote, per kind of call."""
    lines = []
    for t in cal.tokens:
        lo, hi = t.per_token_ci
        lines.append(
            f"{t.what} latency vs tokens out (Theil-Sen, n={t.n}): {t.overhead:.3g} s + "
            f"{t.per_token * 1000:.3g} ms/token [95% {lo * 1000:.3g}, {hi * 1000:.3g}], "
            f"Spearman {t.spearman:.2f}"
        )
    return lines


def overhead_lines(cal: Calibration) -> list[str]:
    """The engine's overhead between stages, and the time after gepa's loop."""
    o = cal.overhead
    gaps = ", ".join(f"{name} {gap:.3g} s" for name, gap in o.gap_by_stage.items())
    lines = [
        f"engine overhead: {o.total:.4g} s outside {o.stages} stages -> "
        f"stage_overhead={o.per_stage:.4g} s (mean gap before: {gaps})"
    ]
    if o.after_loop > 0:
        lines.append(
            f"after gepa's loop: {o.after_loop:.4g} s before run_end in all (not gepa's loop, "
            "e.g. a test-set evaluation; left out of the scenario)"
        )
    return lines


def concurrency_lines(cal: Calibration) -> list[str]:
    """The rollouts and reflections seen in flight, and what dspy.GEPA's recordings imply."""
    c = cal.concurrency
    rollouts = (
        f"peak {c.peak} rollouts in flight of W={c.workers}; the workers busy "
        f"{c.busy_share:.0%} of their usable time in rollout stages"
        if c.peak
        else f"no rollout timed, so none seen in flight (W={c.workers})"
    )
    lines = [
        f"concurrency: {rollouts}; reflections peak {c.reflection_peak} of C={c.reflection_slots}"
    ]
    if cal.scenario.worker_split == "per_candidate":
        lines.append(
            "workers: recorded from dspy.GEPA, whose adapter splits its num_threads among a "
            "stage's candidates -> worker_split=per_candidate"
        )
    if cal.scenario.optimizer == "dspy.GEPA":
        lines.append(
            "reflections: recorded from dspy.GEPA, whose adapter proposes one text at a time, "
            "so reflections never overlap whatever P x N -> optimizer=dspy.GEPA, C=1"
        )
    return lines


def load_effect_lines(cal: Calibration) -> list[str]:
    """Latency against the LM calls in flight at a call's start (plain correlation)."""
    lines = []
    for effect in cal.load_effects:
        if math.isnan(effect.spearman):
            continue
        levels = ", ".join(
            f"{load}: {mean:.3g} s (n={n})" for load, (n, mean) in effect.by_load.items()
        )
        lines.append(
            f"{effect.what} latency vs LM calls in flight at its start: Spearman "
            f"{effect.spearman:.2f} (p={effect.pvalue:.2g}), {effect.slope:+.3g} s per extra "
            f"call; mean by load {levels}"
        )
    return lines


def failure_lines(cal: Calibration) -> list[str]:
    """The proposals the runs lost before gepa judged them, and the [failures] shares."""
    failures = cal.failures.failures
    chosen = (
        ", ".join(f"failures.{name}={value:.3g}" for name, value in failures.to_dict().items())
        if failures.any
        else "no [failures] table: no proposal was lost"
    )
    return [*cal.failures.lines(), f"  -> {chosen}"]


def rollout_lines(cal: Calibration) -> list[str]:
    """The rollout latency's fit: to timed latencies, or to untimed calls' spans."""
    u = cal.untimed
    if u is None:
        return latency_lines(cal.rollout)
    fit = cal.rollout
    (low, high), (mlow, mhigh) = fit.mean_ci, fit.median_ci
    pools = ", ".join(f"{calls} on {pool}" for pool, calls in u.pools.items())
    cis = ", ".join(f"{k} in [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in fit.param_ci.items())
    return [
        f"rollout latency: from the spans of {u.calls} untimed adapter calls ({u.rollouts} "
        f"rollouts, up to {u.largest} a call; calls on each pool size: {pools})"
        + (f" and {u.timed} timed latencies" if u.timed else "")
        + f": mean {fit.chosen.mean():.4g} s [95% {low:.4g}, {high:.4g}], median "
        f"{fit.chosen.params['scale']:.4g} s [{mlow:.4g}, {mhigh:.4g}]",  # a lognormal's scale
        f"  chosen: {describe_latency(fit.chosen)} ({fit.reason})",
        f"  95% bootstrap intervals: {cis}",
    ]


def phase_lines(cal: Calibration) -> list[str]:
    """The phases' own latencies: tested, and written when they differ."""
    if len(cal.rollout_by_phase) < 2:
        return []
    phases = ", ".join(
        f"{p} n={f.n} median {f.median:.3g} s" for p, f in cal.rollout_by_phase.items()
    )
    if math.isnan(cal.phase_pvalue):
        return [f"  by phase: {phases} (too few per phase to test whether they differ)"]
    test = f"Kruskal-Wallis p={cal.phase_pvalue:.2g}"
    own = cal.scenario.rollout_phases
    if not own:
        return [f"  by phase: {phases} ({test}: one distribution serves every phase)"]
    lines = [f"  by phase: {phases} ({test}: they differ; [rollout.phases] for {', '.join(own)})"]
    lines += [f"    {p}: {describe_latency(d)}" for p, d in own.items()]
    return lines


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


def token_lines(cal: Calibration) -> list[str]:
    """The [tokens] table's fits and the [prices] table, or why there is none."""
    fit = cal.token_counts
    if fit is None:
        return [
            "tokens: no [tokens] table: no call in the traces reports its "
            f"{', '.join(cal.tokens_missing)} (dollars and tokens-per-minute limits need one)"
        ]
    lines = []
    for counts in (fit.rollout_input, fit.rollout_output, fit.reflection_output):
        lines.extend(latency_lines(counts, "tokens", "tok"))
    r, t = fit.reflection_input, fit.chosen
    measured = ", ".join(
        f"b={b}: n={n}, mean {mean:.4g}" for b, (n, mean) in r.by_minibatch.items()
    )
    ci = (
        f" [95% {r.per_example_ci[0]:.4g}, {r.per_example_ci[1]:.4g}]"
        if r.per_example_ci is not None
        else ""
    )
    lines += [
        f"reflection input tokens: {measured}",
        f"  = base {t.reflection_input_base:.4g} + {t.reflection_input_per_example:.4g}{ci} "
        f"per example x b; {r.method}; base puts the line through b={t.measured_minibatch}'s "
        "mean" + (" (held at 0: see the note)" if r.floored else ""),
    ]
    lat = fit.latency
    if lat is None:
        lines.append(
            f"reflection latency vs tokens: {fit.latency_reason} "
            "-> reflection_seconds_per_input_token=0"
        )
    else:
        (ilo, ihi), (olo, ohi) = lat.per_input_ci, lat.per_output_ci
        lines += [
            f"reflection latency vs tokens in and out (least squares, HC1 95% intervals, "
            f"n={lat.n}, R^2 {lat.r_squared:.2f}): {lat.intercept:.3g} s "
            f"+ {lat.per_input * 1000:.3g} ms/input token [{ilo * 1000:.3g}, {ihi * 1000:.3g}] "
            f"+ {lat.per_output * 1000:.3g} ms/output token [{olo * 1000:.3g}, {ohi * 1000:.3g}]",
            f"  input coefficient {fit.latency_reason} "
            f"-> reflection_seconds_per_input_token={t.reflection_seconds_per_input_token:.4g}",
        ]
    lines.extend(price_lines(cal))
    return lines


def price_lines(cal: Calibration) -> list[str]:
    prices, tokens, costs = cal.scenario.prices, cal.scenario.tokens, cal.costs
    if prices is None or tokens is None:
        return ["prices: none (--task-model NAME prices the tokens from litellm's table)"]
    b = cal.scenario.minibatch
    rollout = cal.scenario.mean_call_dollars("task")
    reflection = cal.scenario.mean_call_dollars("reflection")
    reflection_model = prices.reflection_model or "(by hand)"
    lines = [
        f"prices ($ per million tokens in / out, litellm's offline table): task "
        f"{prices.task_model} {prices.task_input:g} / {prices.task_output:g}, reflection "
        f"{reflection_model} {prices.reflection_input:g} / {prices.reflection_output:g}; "
        f"a mean rollout ${rollout:.3g}, a mean reflection at b={b} ${reflection:.3g}"
    ]
    if costs.compared_dollars > 0 and costs.priced is not None:
        lines.append(
            f"  the traces record ${costs.compared_dollars:.4g} for the {costs.compared} calls "
            f"with token counts; these prices give ${costs.priced:.4g} for them"
        )
    return lines


def slowdown_lines(cal: Calibration) -> list[str]:
    s = cal.scenario
    servers = cal.servers
    pool = (
        f"lm_servers={servers} ({cal.lm_servers_source})"
        if servers is not None
        else "lm_servers unknown (no limit; pass --lm-servers K for a local pool)"
    )
    lines = [f"LM pool: {pool}"]
    basis = {
        "own": "its own calls, each phase with its own latency",
        "phases pooled": "its own calls, phases pooled: every phase ran at one load, so a "
        "phase's own latency and the load's effect cannot be told apart",
        "pool": "the calls of both models on the shared pool (its own do not show one alone)",
    }
    for role, model in cal.slowdowns.items():
        fit = model.fit
        loads = "; ".join(
            f"{group} " + ", ".join(f"{n} at {m}" for m, n in by_load.items())
            for group, by_load in fit.loads.items()
        )
        lines.append(f"{role} model: calls by load (calls of the model in flight): {loads}")
        if fit.identified:
            low, high = fit.interval
            lines.append(
                f"  load slowdown: beta={fit.beta:.3g} [95% {low:.3g}, {high:.3g}] from {fit.n} "
                f"calls ({basis[model.basis]}; latency x (1 + beta (m - 1)), log least squares); "
                f"{fit.reason} -> load.{role}.slowdown={s.loads.of(role).slowdown:.4g}"
            )
        else:
            lines.append(f"  load slowdown: {fit.reason} -> load.{role}.slowdown=0")
        lines.append(run_spread_line(cal.run_spreads[role]))
    if servers is not None:
        lines.append(
            f"  fitted only on calls that started with at most {servers} in flight: a later "
            "one may have waited for a server, and that wait is not a slowdown"
        )
    lines.append(prefix_cache_line(cal))
    return lines


def run_spread_line(fit: RunSpreadFit) -> str:
    """How much whole runs of one setup differ in this model's speed, and what is kept."""
    chosen = f"-> load.{fit.role}.run_spread={fit.chosen:.4g}"
    if not fit.identified:
        return f"  run spread: {fit.reason} {chosen}"
    low, high = fit.interval
    return (
        f"  run spread: runs' mean log latency differs by sd {fit.spread:.3g} [95% {low:.3g}, "
        f"{high:.3g}] beyond the calls' own spread ({fit.runs} runs of {fit.setups} setup(s) "
        f"run twice or more, {fit.calls} calls); {fit.reason} {chosen}"
    )


def prefix_cache_line(cal: Calibration) -> str:
    fit = cal.prefix_cache
    tokens = (
        ""
        if fit.prefix_tokens is None
        else f"sibling reflections share {fit.prefix_tokens:.4g} prompt tokens on average "
        f"(n={fit.recorded}); "
    )
    interval = ""
    if fit.interval is not None:
        interval = f" [95% {fit.interval[0]:.3g}, {fit.interval[1]:.3g}]"
    return (
        f"reflection prefix cache: servers {'cache' if fit.caches else 'do not cache'} "
        f"prompts: {fit.why}; {tokens}{fit.reason} "
        f"-> load.reflection.prefix_seconds={fit.seconds:.4g}{interval}"
    )


def calibration_header(cal: Calibration, first: Sequence[str] = ()) -> str:
    """The scenario file's header: `first` (whether it reproduces its runs), then the report."""
    title = f"Calibrated scenario '{cal.scenario.name}', written by pxn calibrate."
    return "\n".join([title, "", *first, *calibration_lines(cal)])
