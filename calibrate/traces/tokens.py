"""Tokens: what a call reads and writes, and what that does to its latency.

Latency against output tokens: overhead + time per output token. An LM call's
duration grows with the tokens it writes. A robust line (Theil-Sen: the median
of pairwise slopes) shrugs off the retries and stalls that would drag a
least-squares fit. Reported only: the Scenario draws latencies directly, and
this says what they are made of.

Token counts: the Scenario's [tokens] table (dollars, tokens-per-minute
limits, and b's effect on the reflection's input and latency), fitted from
traces whose calls report tokens_in and tokens_out.

Prices: the [prices] table, from litellm's offline price table for the models named,
and the dollars the traces recorded. A trace's `cost` does not say which price list
produced it, so without a model name no [prices] table is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.stats

from pxn.calibrate.traces.fit import (
    BOOTSTRAP,
    SEED,
    LatencyFit,
    fit_latency,
    interval,
    latency_lines,
    no_tail,
    refit_distribution,
)
from pxn.calibrate.traces.overhead import subsample_pairs
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.prices import Prices
from pxn.tokens import Tokens
from pxn.trace import Event, Reflection, Rollout
from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

MIN_POINTS = 5


@dataclass(frozen=True)
class TokenFit:
    what: str
    n: int
    overhead: float  # seconds at zero output tokens (the intercept)
    per_token: float  # seconds per output token (the slope)
    per_token_ci: tuple[float, float]  # 95%, Theil-Sen's own interval
    spearman: float  # rank correlation of latency and tokens out


def fit_tokens(what: str, events: Sequence[Rollout | Reflection]) -> TokenFit | None:
    """Fit the line to the calls that report tokens_out; None when too few do."""
    pairs = [(float(e.tokens_out), e.duration) for e in events if e.tokens_out is not None]
    if len(pairs) < MIN_POINTS:
        return None
    tokens, seconds = subsample_pairs(*np.array(pairs).T)
    if np.ptp(tokens) == 0:
        return None  # every call wrote as many tokens: no slope to see
    slope, intercept, low, high = scipy.stats.theilslopes(seconds, tokens, alpha=0.95)
    rho = scipy.stats.spearmanr(tokens, seconds).statistic
    return TokenFit(
        what=what,
        n=len(pairs),
        overhead=float(intercept),
        per_token=float(slope),
        per_token_ci=(float(low), float(high)),
        spearman=float(rho),
    )


# ---- token counts: the [tokens] table ----

MIN_LATENCY_FIT = 10  # reflections a three-coefficient least-squares fit needs at the least


def fit_counts(what: str, counts: Sequence[float], *, capped: bool) -> LatencyFit:
    """A distribution of token counts per call, by the same machinery as latencies.

    "auto" decides: large counts fit a continuous family, small or capped ones fail KS
    and are resampled, keeping the lattice and the cap. A zero (an empty reply) is a
    point mass no family has, and fit_latency would set it aside and bias the mean: with
    any zero the counts are resampled as observed. Only an output (`capped`) is screened
    for a cap: an input is never cut, and its few distinct prompts would fool the screen.
    """
    data = np.asarray(counts, dtype=float)
    data = data[np.isfinite(data) & (data >= 0)]
    if not (data == 0).any():
        tail = None if capped else no_tail(len(data), "not screened: an input is never cut")
        return fit_latency(what, data, "auto", tail=tail)
    resamples = np.random.default_rng(SEED).choice(data, size=(BOOTSTRAP, len(data)))
    return LatencyFit(
        what=what,
        samples=tuple(data.tolist()),
        dropped=0,
        fits=(),
        chosen=Distribution("empirical", samples=tuple(data.tolist())),
        reason=f"{int((data == 0).sum())} zero count(s), a point mass no family has: "
        "empirical bootstrap",
        mean_ci=interval(resamples.mean(axis=1)),
        median_ci=interval(np.median(resamples, axis=1)),
        param_ci={},
        tail=no_tail(len(data), "not tested: the counts are resampled as observed"),
    )


@dataclass(frozen=True)
class ReflectionInput:
    """A reflection's input tokens as base + per_example * b: gepa renders the template and
    the parent's text once and one record (input, output, feedback) per minibatch example.
    """

    base: float
    per_example: float
    measured_minibatch: int  # the b most reflections were measured at
    by_minibatch: dict[int, tuple[int, float]]  # b -> (reflections with tokens_in, their mean)
    method: str  # how per_example was found, for the report
    per_example_ci: tuple[float, float] | None = None  # Theil-Sen's 95%, when regressed on b
    floored: bool = False  # the line was held at base 0 (see fit_reflection_input)


def fit_reflection_input(
    inputs_by_b: dict[int, list[float]], rollout_records: Sequence[float]
) -> ReflectionInput:
    """Fit base and per_example from reflections' tokens_in at each b.

    At two or more b, per_example is the Theil-Sen slope against b. At one b it is a mean
    of `rollout_records` (the parent minibatch rollouts' tokens in + out): a record holds
    an example's input and output as a rollout does (plus feedback, less the program's
    prompt), which over-states b's effect on a task with a long prompt. base puts the
    line through the mean at the measured b, so the dollars there are as measured; where
    that would be negative, base is 0 and `floored` says so.
    """
    by_b = {b: (len(v), float(np.mean(v))) for b, v in sorted(inputs_by_b.items()) if v}
    if not by_b:
        raise ValueError("no reflection reports its tokens_in")
    # The most reflections (the smallest b on a tie): the pooled latency is mostly theirs.
    measured = max(by_b, key=lambda b: (by_b[b][0], -b))
    measured_mean = by_b[measured][1]
    ci = None
    if len(by_b) >= 2:
        b_values = np.concatenate([np.full(len(v), b, dtype=float) for b, v in inputs_by_b.items()])
        tokens = np.concatenate([np.asarray(v, dtype=float) for v in inputs_by_b.values()])
        b_values, tokens = subsample_pairs(b_values, tokens)
        slope, _, low, high = scipy.stats.theilslopes(tokens, b_values, alpha=0.95)
        per_example, ci = float(slope), (float(low), float(high))
        method = f"Theil-Sen of reflection tokens_in against b over b={', '.join(map(str, by_b))}"
    elif len(rollout_records):
        per_example = float(np.mean(rollout_records))
        method = (
            f"one b ({measured}) only: per_example is a mean rollout's tokens in + out "
            f"(n={len(rollout_records)}), as a record holds an example's input and output "
            "(approximate: a rollout's input also holds the program's prompt, a record adds "
            "the feedback; runs at two or more b fit it instead)"
        )
    else:
        per_example = 0.0
        method = f"one b ({measured}) and no rollout token counts: per_example unknown, 0"
    per_example = max(per_example, 0.0)
    base = measured_mean - per_example * measured
    floored = base < 0
    if floored:
        base, per_example = 0.0, measured_mean / measured
    return ReflectionInput(base, per_example, measured, by_b, method, ci, floored)


@dataclass(frozen=True)
class LatencyOnTokens:
    """Latency = intercept + per_input * tokens_in + per_output * tokens_out.

    Least squares with HC1 errors (a longer call varies more); both counts enter, so
    that correlated counts do not credit one with the other's time.
    """

    what: str
    n: int
    intercept: float
    per_input: float  # seconds per input token
    per_input_ci: tuple[float, float]  # 95%
    per_output: float  # seconds per output token
    per_output_ci: tuple[float, float]
    r_squared: float

    @property
    def input_effect(self) -> bool:
        """Positive, and its 95% interval excludes 0."""
        return self.per_input > 0 and self.per_input_ci[0] > 0


def fit_latency_on_tokens(
    what: str, calls: Sequence[tuple[Rollout | Reflection, float]]
) -> tuple[LatencyOnTokens | None, str]:
    """Fit the plane to (call, seconds) pairs; None and why when it cannot be fitted. Only
    first-try successes count: a retry's back-off is no token count's."""
    rows = [
        (1.0, float(e.tokens_in), float(e.tokens_out), seconds)
        for e, seconds in calls
        if e.tokens_in is not None and e.tokens_out is not None
        if e.error is None and e.attempts == 1
    ]
    if len(rows) < MIN_LATENCY_FIT:
        return None, f"{len(rows)} {what}s with both token counts, too few (need {MIN_LATENCY_FIT})"
    data = np.array(rows)
    x, y = data[:, :3], data[:, 3]
    if np.ptp(x[:, 1]) == 0:
        return None, f"every {what} read as many tokens: no slope to see"
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    if rank < 3:
        return None, f"{what} tokens in and out are collinear: their effects cannot be told apart"
    n, k = x.shape
    residuals = y - x @ coef
    bread = np.linalg.inv(x.T @ x)
    meat = (x * residuals[:, None] ** 2).T @ x
    cov = bread @ meat @ bread * n / (n - k)
    half = scipy.stats.t.ppf(0.975, n - k) * np.sqrt(np.diag(cov))
    total = np.sum((y - y.mean()) ** 2)
    return LatencyOnTokens(
        what=what,
        n=n,
        intercept=float(coef[0]),
        per_input=float(coef[1]),
        per_input_ci=(float(coef[1] - half[1]), float(coef[1] + half[1])),
        per_output=float(coef[2]),
        per_output_ci=(float(coef[2] - half[2]), float(coef[2] + half[2])),
        r_squared=float(1 - np.sum(residuals**2) / total) if total > 0 else float("nan"),
    ), ""


# The token-count families of [tokens], each (kind of call, its count).
TOKEN_FIELDS = {
    "rollout_input": ("rollout", "tokens_in"),
    "rollout_output": ("rollout", "tokens_out"),
    "reflection_output": ("reflection", "tokens_out"),
}


@dataclass(frozen=True)
class TokenCounts:
    """Every fit behind the [tokens] table, and the table."""

    rollout_input: LatencyFit
    rollout_output: LatencyFit
    reflection_output: LatencyFit
    reflection_input: ReflectionInput
    latency: LatencyOnTokens | None  # reflection latency against tokens in and out
    latency_reason: str  # whether its input coefficient is used, and why
    chosen: Tokens


def missing_token_counts(
    rollouts: Sequence[Rollout], reflections: Sequence[Reflection]
) -> list[str]:
    """The counts [tokens] needs that no call reports, e.g. ["reflection tokens_in"]."""
    return [
        f"{what} {name}"
        for what, events in (("rollout", rollouts), ("reflection", reflections))
        for name in ("tokens_in", "tokens_out")
        if all(getattr(e, name) is None for e in events)
    ]


def fit_token_counts(
    traces: Sequence[Trace], reflection_latencies: Sequence[tuple[Reflection, float]]
) -> TokenCounts:
    """Fit the [tokens] table; the traces must report every count (missing_token_counts).
    `reflection_latencies` are as the reflection latency was fitted (served alone), the
    units of the shift they make."""
    rollouts = [r for t in traces for r in t.of(Rollout)]
    reflections = [r for t in traces for r in t.of(Reflection)]

    def counts(events: Sequence[Event], name: str) -> list[float]:
        return [float(v) for e in events if (v := getattr(e, name)) is not None]

    inputs_by_b: dict[int, list[float]] = {}
    for trace in traces:
        inputs_by_b.setdefault(trace.run_start.minibatch, []).extend(
            counts(trace.of(Reflection), "tokens_in")
        )
    # The records a reflection reads come from its parent's minibatch rollouts.
    both = [r for r in rollouts if r.tokens_in is not None and r.tokens_out is not None]
    parents = [r for r in both if r.phase == "parent_minibatch"] or both
    reflection_input = fit_reflection_input(
        inputs_by_b, [float(r.tokens_in + r.tokens_out) for r in parents]
    )
    latency, why = fit_latency_on_tokens("reflection", reflection_latencies)
    if latency is None:
        per_input, reason = 0.0, f"no latency-against-tokens fit ({why})"
    elif latency.input_effect:
        per_input, reason = latency.per_input, "positive and its 95% interval excludes 0: used"
    else:
        per_input = 0.0
        reason = "its 95% interval holds 0" if latency.per_input > 0 else "not positive"
        reason += ": not used, the reflection latency does not change with b"
    events = {"rollout": rollouts, "reflection": reflections}
    fits = {
        name: fit_counts(
            name.replace("_", " "), counts(events[kind], column), capped=column == "tokens_out"
        )
        for name, (kind, column) in TOKEN_FIELDS.items()
    }
    tokens = Tokens(
        **{name: fit.chosen for name, fit in fits.items()},
        reflection_input_base=reflection_input.base,
        reflection_input_per_example=reflection_input.per_example,
        measured_minibatch=reflection_input.measured_minibatch,
        reflection_seconds_per_input_token=per_input,
    )
    return TokenCounts(
        **fits,
        reflection_input=reflection_input,
        latency=latency,
        latency_reason=reason,
        chosen=tokens,
    )


def draw_token_counts(resample: Resample) -> dict[str, float]:
    """The token-count families refitted to the resampled calls' counts (a call cut at a
    timeout has no row of its own: its tries are the rows)."""
    cal, calls, draw = resample.calibration, resample.units.calls, {}
    if cal.token_counts is None:
        return draw
    for name, (kind, column) in TOKEN_FIELDS.items():
        counts = getattr(calls, column)[calls.of(kind) & ~calls.censored]
        fit = getattr(cal.token_counts, name)
        point = getattr(cal.scenario.tokens, name)
        censor_at = fit.tail.low if fit.tail.capped else None
        draw |= refit_distribution(
            f"tokens.{name}", point, counts[np.isfinite(counts)], np.empty(0), censor_at
        )
    return draw


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


# ---- prices: the [prices] table ----


def lookup_prices(task_model: str | None, reflection_model: str | None) -> Prices | None:
    """Prices for the named models (the reflection model defaults to the task model)."""
    if reflection_model and not task_model:
        raise PxnError("needs a task model too (the model the rollouts ran on)",
                       subject="reflection model")  # fmt: skip
    if not task_model:
        return None
    table = {"task_model": task_model}
    if reflection_model:
        table["reflection_model"] = reflection_model
    return Prices.from_dict(table)


@dataclass(frozen=True)
class RecordedCosts:
    """What the traces' `cost` fields add up to, and the same calls at the given prices."""

    dollars: float  # every cost field, summed
    calls: int  # calls with a cost field
    compared: int  # of those, calls with both token counts (what `priced` covers)
    compared_dollars: float  # their recorded cost
    priced: float | None  # their tokens at the given prices; None without prices


def recorded_costs(
    rollouts: Sequence[Rollout], reflections: Sequence[Reflection], prices: Prices | None
) -> RecordedCosts:
    roles = ((rollouts, "task"), (reflections, "reflection"))
    costed = [(e, role) for events, role in roles for e in events if e.cost is not None]
    counted = [(e, r) for e, r in costed if e.tokens_in is not None and e.tokens_out is not None]
    priced = None
    if prices is not None:
        priced = sum((prices.dollars(r, e.tokens_in, e.tokens_out) for e, r in counted), 0.0)
    return RecordedCosts(
        dollars=sum((e.cost for e, _ in costed), 0.0),
        calls=len(costed),
        compared=len(counted),
        compared_dollars=sum((e.cost for e, _ in counted), 0.0),
        priced=priced,
    )


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
