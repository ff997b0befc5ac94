"""The paper's closed-form runtime model, computed from the same Scenario.

With k = P*N proposals per step, per-proposal acceptance a, mean rollout
latency T_e and mean reflection latency T_r:

    q_k       = 1 - (1 - a)^k                     an iteration runs full validation
    L_val     = T_e * max(1, k V / W)             the paper's finite-worker rule
    L_step    = the two minibatch stages (k b rollouts each, same rule) + the
                reflections (k calls, at most C at a time)
    T(k)      = L_seed + iterations * (L_step + q_k L_val)
    T(1)/T(k) ~ k (L_step + a L_val) / (L_step + q_k L_val)    (the paper's ratio)
    bound     = B T_e / W                         strong scaling: evaluation alone

Iterations are the metric calls the budget affords after the seed validation,
divided by the expected calls of one iteration (2 k b minibatch rollouts plus V
per child selected for full validation). Each stage also pays the scenario's
fixed engine overhead. Like the paper, this ignores that a stage lasts as
long as its slowest call and that gepa skips parents with perfect minibatches;
the simulator models both.

A local LM pool of K servers (Scenario.lm_servers) narrows the pool to
min(W, K) rollout slots and the reflection cap to min(C, K), here as in the
simulator. Its load_slowdown is left out of the closed form: the paper's
model has independent latencies, and the simulator carries the slowdown.

With token counts, T_r is the reflection latency at the scenario's b (shifted
by Tokens.reflection_latency_shift, floored at 0, as the simulator shifts
each call). Provider rate limits are not in T(k); beside it stands

    rate_bound = max over the limits of (A - burst) / (limit per second)

where A is what the run asks of that limit (B metric calls, or the proposals
iterations * k for reflections; times the mean tokens per call for a
tokens-per-minute limit) and burst the bucket's capacity, which the run
starts with. No allocation finishes sooner, whatever W (in expectation: A
uses mean token counts and the expected proposals). 0 without limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import binom

from pxn.scenario import Scenario
from pxn.shape import Shape


@dataclass(frozen=True)
class AnalyticPrediction:
    k: int
    acceptance: float  # a, averaged over the run's proposals when it decays
    q_k: float
    iterations: float
    l_step: float  # seconds
    l_val: float  # seconds
    wall_clock: float  # T(k), seconds
    speedup: float  # the paper's T(1)/T(k) ratio
    bound: float  # B T_e / W, seconds
    rate_bound: float = 0.0  # seconds the provider's rate limits need at least (0: no limits)


def expected_selected(k: int, a: float, limit: int | None) -> float:
    """Expected children per iteration sent to full validation: E[min(Bin(k, a), limit)]."""
    if limit is None or limit >= k:
        return k * a
    accepted = binom(k, a)
    return sum(min(j, limit) * accepted.pmf(j) for j in range(k + 1))


def stage_latency(calls: float, slots: int, mean_latency: float) -> float:
    """The paper's rule: calls finish in one round while they fit the pool, else queue."""
    return mean_latency * max(1.0, calls / slots)


def analytic(scenario: Scenario, shape: Shape) -> AnalyticPrediction:
    k, b, v = shape.k, scenario.minibatch, scenario.valset_size
    w = scenario.loads.task.slots(scenario.workers)  # calls the LM serves at once
    c = scenario.loads.reflection.slots(scenario.reflection_concurrency)
    t_e, t_r = scenario.rollout.mean(), scenario.reflection.mean()
    tokens = scenario.tokens
    if tokens is not None:  # a reflection's input, hence its latency, grows with b
        t_r = max(0.0, t_r + tokens.reflection_latency_shift(b))
    overhead, limit = scenario.stage_overhead, scenario.selection.limit
    afforded = scenario.budget - v  # the seed validation comes first

    # With a decaying acceptance, a depends on how many proposals the budget
    # affords, which depends on a: iterate to the fixed point.
    a = scenario.acceptance.a0
    for _ in range(50):
        calls_per_iteration = 2 * k * b + expected_selected(k, a, limit) * v
        iterations = afforded / calls_per_iteration
        a = scenario.acceptance.mean_over(iterations * k)

    q_k = 1 - (1 - a) ** k
    l_step = 2 * (overhead + stage_latency(k * b, w, t_e)) + overhead + stage_latency(k, c, t_r)
    l_val = overhead + stage_latency(min(k, limit or k) * v, w, t_e)
    l_seed = overhead + stage_latency(v, w, t_e)
    return AnalyticPrediction(
        k=k,
        acceptance=a,
        q_k=q_k,
        iterations=iterations,
        l_step=l_step,
        l_val=l_val,
        wall_clock=l_seed + iterations * (l_step + q_k * l_val),
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
