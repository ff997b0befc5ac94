"""The paper's closed-form runtime model, computed from the same Scenario.

With k = P*N proposals per iteration, per-proposal acceptance a, mean rollout
latency T_e (per phase: T_seed, T_parent, T_child, T_val) and mean reflection
latency T_r:

    q_k       = 1 - (1 - a)^k                     an iteration runs full validation
    L_val     = T_val * max(1, k V / W)           the paper's finite-worker rule
    L_step    = the two minibatch stages (k b rollouts each, same rule) + the
                reflections (k calls, at most C at a time)
    T(k)      = L_seed + E[iterations] L_step + E[full-validation iterations] L_val
    T(1)/T(k) ~ k (L_step + a L_val) / (L_step + q_k L_val)    (the paper's ratio)
    bound     = B T_e / W                         strong scaling: evaluation alone

Means are of capped calls where the scenario caps a tail (Distribution.mean:
the cap and its retries included); T_e in the bound is the phases' means
weighted by the metric calls each phase is expected to make. Each stage also
pays the scenario's fixed engine overhead.

Acceptance. An iteration's proposals share the acceptance a(i) of the i = n k
proposals made before iteration n (decaying, held from `decay_until` on; a
batched shape's scaled by the scenario's `batched` ratio). With a
correlation rho the iteration's rate p is Beta(a (1/rho - 1), (1 - a)(1/rho - 1))
and its accepted count beta-binomial, so q_k = 1 - E[(1 - p)^k]
= 1 - B(alpha, beta + k) / B(alpha, beta), and the children sent to full
validation are min(accepted, limit) (best: 1, topk:K: K), less the repeats
dropped when children are identical (each after the first with chance
duplicate_children).

Iterations, exactly. gepa checks the budget only at the top of an iteration,
so the run's iterations are the first n whose calls reach the budget:
N = min{n : V + X_1 + ... + X_n >= B}, X_n = 2 k b + V Z_n the metric calls of
iteration n, Z_n its validated children. E[N] = sum over n >= 0 of
P(X_1 + ... + X_n < B - V), computed by convolving the distribution of the
calls spent (on the lattice of gcd(2 k b, V)) one iteration at a time until
no probability is left below the budget; E[full-validation iterations] is
the same sum weighted by each iteration's q_k. This is exact for the model's
X_n, the last iteration's overshoot included (B/E[X] would leave it out).
What the closed form leaves out, the simulator models: a stage lasts as long
as its slowest call, gepa skips parents perfect on their minibatch,
evaluates a repeated (parent, minibatch) pair once, draws parents from its
Pareto front, and counts proposals after skips.

A local LM pool of K servers (Scenario.loads) narrows W to min(W, K) and C
to min(C, K), as in the simulator; its load slowdown is the simulator's alone
(the paper's model has independent latencies).

With token counts, T_r is the reflection latency at the scenario's b (shifted
by Tokens.reflection_latency_shift, floored at 0, as the simulator shifts
each call). Provider rate limits are not in T(k); beside it stands

    rate_bound = max over the limits of (A - burst) / (limit per second)

where A is what the run asks of that limit (B metric calls, or the proposals
E[iterations] k for reflections; times the mean tokens per call for a
tokens-per-minute limit) and burst the bucket's capacity, which the run
starts with: no allocation finishes sooner in expectation, whatever W. 0
without limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import betabinom, binom

from pxn.acceptance import Acceptance
from pxn.scenario import Scenario
from pxn.shape import Shape

# The iteration count's sum stops once less than this probability is left below the budget.
NEGLIGIBLE = 1e-13


@dataclass(frozen=True)
class AnalyticPrediction:
    k: int
    acceptance: float  # a, averaged over the run's iterations when it decays
    q_k: float  # averaged over the run's iterations when the acceptance decays
    iterations: float  # expected, the last one's overshoot included
    l_step: float  # seconds
    l_val: float  # seconds
    wall_clock: float  # T(k), seconds
    speedup: float  # the paper's T(1)/T(k) ratio
    bound: float  # B T_e / W, seconds
    rate_bound: float = 0.0  # seconds the provider's rate limits need at least (0: no limits)


def accepted_pmf(k: int, a: float | np.ndarray, correlation: float = 0.0) -> np.ndarray:
    """P(j of an iteration's k proposals are accepted), j = 0..k along the last axis.

    Binomial, or beta-binomial with a correlation; `a` may be an array of rates,
    one per iteration (then one row per iteration).
    """
    a = np.asarray(a, dtype=float)[..., None]
    j = np.arange(k + 1)
    pmf = binom.pmf(j, k, a)
    spread = 1 / correlation - 1 if correlation else 0.0
    mixed = (a[..., 0] > 0) & (a[..., 0] < 1)
    if spread and mixed.any():  # a rate of 0 or 1 has no spread to draw from
        rates = a[mixed]
        pmf[mixed] = betabinom.pmf(j, k, rates * spread, (1 - rates) * spread)
    return pmf


def selected_pmf(accepted: np.ndarray, limit: int | None) -> np.ndarray:
    """P(j children selected): min(accepted, limit)."""
    if limit is None or limit >= accepted.shape[-1] - 1:
        return accepted
    selected = accepted[..., : limit + 1].copy()
    selected[..., limit] += accepted[..., limit + 1 :].sum(axis=-1)
    return selected


def validated_pmf(selected: np.ndarray, duplicates: float) -> np.ndarray:
    """P(j children validated): the first selected, and each later one not a repeat."""
    if not duplicates:
        return selected
    validated = np.zeros_like(selected)
    validated[..., 0] = selected[..., 0]
    for s in range(1, selected.shape[-1]):
        kept = binom.pmf(np.arange(s), s - 1, 1 - duplicates)
        validated[..., 1 : s + 1] += selected[..., s : s + 1] * kept
    return validated


def expected_selected(k: int, a: float, limit: int | None, correlation: float = 0.0) -> float:
    """Expected children of an iteration sent to full validation: E[min(accepted, limit)]."""
    selected = selected_pmf(accepted_pmf(k, a, correlation), limit)
    return float(np.arange(k + 1)[: len(selected)] @ selected)


@dataclass(frozen=True)
class RunCounts:
    """Expectations over a run's iterations (sums over them of P(the iteration runs) x ...)."""

    iterations: float
    full_val_iterations: float
    acceptance: float  # sum of each iteration's a
    validated: float  # children validated


@lru_cache(maxsize=4096)
def run_counts(
    afforded: int,
    minibatch_calls: int,
    valset: int,
    k: int,
    acceptance: Acceptance,
    limit: int | None,
    duplicates: float,
) -> RunCounts:
    """E[N] and company for N = min{n : X_1 + ... + X_n >= afforded}, X = minibatch_calls + V Z.

    `alive` holds P(the first n iterations spent s calls and left budget), s
    on the lattice of the calls' gcd; each iteration moves it by its
    calls, and what crosses the budget is done.
    """
    unit = math.gcd(minibatch_calls, valset)
    cells = -(-afforded // unit)  # s units spent leave budget iff s < afforded / unit
    step = minibatch_calls // unit  # every iteration moves at least this far
    # Iteration n's rate and distribution of validated children (one row when constant).
    rates = np.atleast_1d(acceptance.probability(np.arange(max(cells, 0) // step + 1) * k))
    pmfs = validated_pmf(selected_pmf(accepted_pmf(k, rates, acceptance.correlation), limit),
                         duplicates)  # fmt: skip
    children = pmfs @ np.arange(pmfs.shape[-1])
    # alive[i]: P(lo + i units spent, budget left); lo rises by `step` an iteration.
    alive = np.zeros(max(cells, 0))
    if cells > 0:
        alive[0] = 1.0
    lo = n = 0
    iterations = full_val = accept = validated = 0.0
    while (running := float(alive.sum())) > NEGLIGIBLE:
        row = min(n, len(rates) - 1)
        pmf = pmfs[row]
        iterations += running
        full_val += running * (1 - pmf[0])
        accept += running * rates[row]
        validated += running * children[row]
        lo += step
        size = cells - lo
        if size <= 0:
            break
        moved = np.zeros(size)
        for z, chance in enumerate(pmf):
            extra = z * valset // unit
            if chance > 0 and extra < size:
                moved[extra:] += chance * alive[: size - extra]
        alive = moved
        n += 1
    return RunCounts(iterations, full_val, float(accept), float(validated))


def stage_latency(calls: float, slots: int, mean_latency: float) -> float:
    """The paper's rule: calls finish in one round while they fit the pool, else queue."""
    return mean_latency * max(1.0, calls / slots)


def analytic(
    scenario: Scenario, shape: Shape, acceptance: Acceptance | None = None
) -> AnalyticPrediction:
    """T(k) and company; `acceptance` stands in for the scenario's where it has none (the
    quality model decides acceptance, and the simulated runs' rate is the closed form's a)."""
    if acceptance is None:
        if scenario.acceptance is None:
            raise ValueError("a scenario with the quality model needs the simulated acceptance")
        acceptance = scenario.acceptance
    k, b, v = shape.k, scenario.minibatch, scenario.valset_size
    w = scenario.loads.task.slots(scenario.workers)  # calls the LM serves at once
    c = scenario.loads.reflection.slots(scenario.reflection_concurrency)
    t_seed, t_parent, t_child, t_val = (
        scenario.rollout_latency(phase).mean()
        for phase in ("seed_val", "parent_minibatch", "child_minibatch", "full_val")
    )
    t_r = scenario.reflection.mean()
    tokens = scenario.tokens
    if tokens is not None:  # a reflection's input, hence its latency, grows with b
        t_r = max(0.0, t_r + tokens.reflection_latency_shift(b))
    overhead, limit = scenario.stage_overhead, scenario.selection.limit
    acceptance = acceptance.for_width(k)

    afforded = scenario.budget - v  # the seed validation comes first
    counts = run_counts(afforded, 2 * k * b, v, k, acceptance, limit, scenario.duplicate_children)
    iterations = counts.iterations
    if acceptance.tau is None:  # the same every iteration
        a = acceptance.a0
        q_k = 1 - float(accepted_pmf(k, a, acceptance.correlation)[0])
    else:
        a = counts.acceptance / iterations if iterations else acceptance.a0
        q_k = counts.full_val_iterations / iterations if iterations else 1 - (1 - a) ** k

    l_step = (
        3 * overhead
        + stage_latency(k * b, w, t_parent)
        + stage_latency(k, c, t_r)
        + stage_latency(k * b, w, t_child)
    )
    l_val = overhead + stage_latency(min(k, limit or k) * v, w, t_val)
    l_seed = overhead + stage_latency(v, w, t_seed)
    if scenario.rollout_phases:  # T_e: the phases' means, weighted by their expected calls
        calls = [v, iterations * k * b, iterations * k * b, counts.validated * v]
        t_e = float(np.average([t_seed, t_parent, t_child, t_val], weights=calls))
    else:
        t_e = t_seed
    return AnalyticPrediction(
        k=k,
        acceptance=a,
        q_k=q_k,
        iterations=iterations,
        l_step=l_step,
        l_val=l_val,
        wall_clock=l_seed + iterations * l_step + counts.full_val_iterations * l_val,
        speedup=k * (l_step + a * l_val) / (l_step + q_k * l_val),
        bound=scenario.budget * t_e / w,
        rate_bound=rate_bound(scenario, iterations * k),
    )


def rate_bound(scenario: Scenario, proposals: float) -> float:
    """The fewest seconds the provider's limits allow for B metric calls and these proposals.

    Each limit is a bucket that starts full with `burst_seconds` of allowance
    and refills at limit/60 a second, so asking it for A needs at least
    (A - capacity) / rate seconds.
    """
    limits, tokens = scenario.rate_limits, scenario.tokens
    asks: list[tuple[float | None, float]] = [
        (limits.task.rpm, scenario.budget),
        (limits.reflection.rpm, proposals),
    ]
    if tokens is not None:
        per_rollout = tokens.rollout_input.mean() + tokens.rollout_output.mean()
        per_reflection = (
            tokens.reflection_input(scenario.minibatch) + tokens.reflection_output.mean()
        )
        asks += [
            (limits.task.tpm, scenario.budget * per_rollout),
            (limits.reflection.tpm, proposals * per_reflection),
        ]
    burst = limits.burst_seconds
    return max(
        (
            max(0.0, (ask - per_minute * burst / 60) / (per_minute / 60))
            for per_minute, ask in asks
            if per_minute is not None
        ),
        default=0.0,
    )
