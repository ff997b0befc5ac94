"""Acceptance: how often a proposal beats its parent, and whether that decays.

Each judged proposal is a Bernoulli trial. The constant model has one
probability a (its MLE is the observed share, given with a Wilson interval).
The Scenario's decaying model a(i) = a0 exp(-i / tau), i counting the
proposals made before in the same run, is fitted by maximum likelihood over
the proposals in order. Constant is kept unless a likelihood-ratio test
supports the decay: the two are nested (constant is 1/tau = 0), so twice the
log-likelihood gain is referred to chi-square with one degree of freedom.
The null sits on the boundary of the decay rate's range, which makes that
test conservative: when it says decay, decay is there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from pxn.acceptance import Acceptance
from pxn.errors import PxnError
from pxn.trace import Decision, Trace

DECAY_ALPHA = 0.05  # significance the decay must reach to replace the constant
_EPS = 1e-12


@dataclass(frozen=True)
class AcceptanceFit:
    proposals: int
    accepted: int
    wilson: tuple[float, float]  # 95% interval of the constant probability
    constant_log_likelihood: float
    decay_a0: float
    decay_tau: float  # proposals; inf when the MLE is no decay at all
    decay_log_likelihood: float
    lr_statistic: float
    lr_pvalue: float
    chosen: Acceptance
    reason: str

    @property
    def rate(self) -> float:
        return self.accepted / self.proposals


def proposal_outcomes(trace: Trace) -> np.ndarray:
    """Accepted (1) or not (0) for each judged proposal, in the order the run made them."""
    decisions = trace.live(Decision)
    # Stable sort: within an iteration the trace's own order is gepa's task order.
    decisions.sort(key=lambda d: d.iteration)
    return np.array([1.0 if d.accepted else 0.0 for d in decisions])


def _log_likelihood(outcomes: np.ndarray, made: np.ndarray, a0: float, rate: float) -> float:
    p = np.clip(a0 * np.exp(-rate * made), _EPS, 1 - _EPS)
    return float(np.sum(outcomes * np.log(p) + (1 - outcomes) * np.log1p(-p)))


def fit_acceptance(runs: Sequence[np.ndarray]) -> AcceptanceFit:
    """Fit both models to the outcomes of one or more runs (each in proposal order)."""
    runs = [np.asarray(r, dtype=float) for r in runs]
    outcomes = np.concatenate(runs) if runs else np.empty(0)
    if len(outcomes) == 0:
        raise PxnError(
            "no judged proposals (decision events) in the traces: acceptance cannot be "
            "calibrated; run until at least one iteration completes"
        )
    # i restarts at 0 in each run: the decay is over a run's own proposals.
    made = np.concatenate([np.arange(len(r), dtype=float) for r in runs])
    n, k = len(outcomes), int(outcomes.sum())
    wilson = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    rate0 = k / n
    constant_ll = _log_likelihood(outcomes, made, rate0, 0.0)

    a0, rate, decay_ll = rate0, 0.0, constant_ll
    if 0 < k < n:
        # Rates are searched in units of 1/(proposals in the longest run).
        span = float(max(len(r) for r in runs))

        def negative(x: np.ndarray) -> float:
            return -_log_likelihood(outcomes, made, x[0], x[1] / span)

        result = scipy.optimize.minimize(
            negative,
            x0=np.array([min(rate0 * 1.5, 0.99), 1.0]),
            bounds=[(1e-6, 1 - 1e-6), (0.0, 50.0)],
            method="L-BFGS-B",
        )
        if result.success and -result.fun > constant_ll:
            a0, rate, decay_ll = float(result.x[0]), float(result.x[1]) / span, -float(result.fun)
    statistic = max(0.0, 2 * (decay_ll - constant_ll))
    pvalue = float(scipy.stats.chi2.sf(statistic, df=1))
    tau = 1 / rate if rate > 0 else math.inf
    if pvalue < DECAY_ALPHA and math.isfinite(tau):
        chosen = Acceptance(a0, tau)
        reason = f"decay supported (LR={statistic:.2f}, p={pvalue:.2g})"
    else:
        chosen = Acceptance(rate0)
        reason = f"constant: decay not supported (LR={statistic:.2f}, p={pvalue:.2g})"
    return AcceptanceFit(
        proposals=n,
        accepted=k,
        wilson=(float(wilson.low), float(wilson.high)),
        constant_log_likelihood=constant_ll,
        decay_a0=a0,
        decay_tau=tau,
        decay_log_likelihood=decay_ll,
        lr_statistic=statistic,
        lr_pvalue=pvalue,
        chosen=chosen,
        reason=reason,
    )
