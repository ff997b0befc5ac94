"""A past run's candidates' rollout latencies from its marked stages (stage_times.py)."""

from __future__ import annotations

import numpy as np

from pxn.calibrate.past_runs.stage_times import (
    MarkedSpans,
    ProposalSpan,
    StageSpan,
    fit_candidate_factors,
    fit_reflection_latency,
    fit_stage_latency,
)


def spans_of(factors: dict[int, float], per: int, rng: np.random.Generator) -> list[StageSpan]:
    """Spans of three-rollout minibatches (`per` a candidate) and one valset's per candidate,
    lognormal about 5 s and 12 s times the candidate's factor, the seed's (0) among them."""
    spans = []
    for candidate, factor in factors.items():
        for i in range(per):
            span = 5.0 * factor * float(np.exp(rng.normal(0, 0.2)))
            spans.append(StageSpan(i + 1, "parent_minibatch", span, 3, (candidate,)))
        phase = "seed_val" if candidate == 0 else "full_val"
        spans.append(StageSpan(0, phase, 12.0 * factor, 6, (candidate,)))
    return spans


def test_a_slower_candidate_is_found_and_its_factor_measured() -> None:
    spans = spans_of({0: 1.0, 1: 1.5, 2: 0.9}, per=8, rng=np.random.default_rng(1))
    fit = fit_candidate_factors(spans)
    assert fit.chosen is not None and fit.pvalue < 0.05
    assert abs(fit.factors[1] - 1.5) < 0.15 and abs(fit.factors[2] - 0.9) < 0.1
    assert fit.chosen.exponent == 1.0 and sorted(fit.chosen.lengths) == sorted(fit.factors.values())
    # A span of a child never in the pool is taken at the proposals' mean factor.
    unknown = StageSpan(3, "child_minibatch", 6.0, 3)
    assert fit.of(unknown) == np.mean(fit.chosen.lengths)
    assert fit.of(spans[0]) == 1.0  # the seed's


def test_candidates_as_fast_as_the_seed_are_kept_as_the_seed_mostly() -> None:
    """Equal latencies: the test claims a difference about 5% of the time, no more."""
    claimed = sum(
        fit_candidate_factors(spans_of({0: 1.0, 1: 1.0, 2: 1.0}, 8, np.random.default_rng(s)))
        .chosen is not None
        for s in range(200)
    )  # fmt: skip
    assert claimed <= 20  # 5% of 200 is 10; binomial 99.9% below 21


def test_a_candidate_timed_only_where_the_seed_was_not_is_not_compared() -> None:
    spans = [
        StageSpan(1, "parent_minibatch", 5.0, 3, (0,)),
        StageSpan(2, "parent_minibatch", 5.5, 3, (0,)),
        StageSpan(3, "full_val", 20.0, 6, (1,)),  # no seed validation among the spans
    ]
    fit = fit_candidate_factors(spans)
    assert fit.chosen is None and fit.factors == {} and "not fitted" in fit.reason
    assert fit.of(spans[2]) == 1.0


def test_spans_that_all_agree_claim_nothing() -> None:
    """Log lines time spans to the second, so every span can read the same."""
    spans = [StageSpan(i, "parent_minibatch", 6.0, 3, (i % 2,)) for i in range(1, 9)]
    fit = fit_candidate_factors(spans)
    assert fit.chosen is None and fit.pvalue == 1.0 and fit.factors == {1: 1.0}


def test_rejected_childrens_spans_are_the_proposals_lengths() -> None:
    """DSPy's log times a rejected child's minibatch: the proposals as the run made them,
    not only the ones it kept, give each proposal's factor."""
    rng = np.random.default_rng(2)
    spans = spans_of({0: 1.0, 1: 1.6}, per=8, rng=rng)
    children = [
        StageSpan(20 + i, "child_minibatch", 5.0 * 1.2 * float(np.exp(rng.normal(0, 0.2))), 3)
        for i in range(10)
    ]
    fit = fit_candidate_factors(spans + children)
    assert fit.chosen is not None and len(fit.chosen.lengths) == len(children)
    assert abs(float(np.median(fit.chosen.lengths)) - 1.2) < 0.15
    assert abs(fit.factors[1] - 1.6) < 0.2  # the kept candidate's, as before
    assert "10 rejected children" in fit.reason
    # Too few children to be a spread: the kept candidates' factors serve.
    few = fit_candidate_factors(spans + children[:2])
    assert few.chosen is not None and few.chosen.lengths == (few.factors[1],)


def test_proposal_spans_shorter_than_their_child_are_said_to_be_set_aside() -> None:
    """A reflection is a proposal's span less its child's minibatch at the mean makespan; a
    span below that is no reflection, and the report says the fit leans long without it."""
    rng = np.random.default_rng(3)
    spans = spans_of({0: 1.0}, per=12, rng=rng)  # three-rollout minibatches about 5 s
    stages = fit_stage_latency(spans, 2, "MLflow")
    assert stages is not None
    long = [ProposalSpan(i, 20.0 + i, 3) for i in range(9)]
    short = [ProposalSpan(20 + i, 1.0, 3) for i in range(2)]
    fit = fit_reflection_latency(MarkedSpans([], proposals=long + short), stages, 2, "MLflow")
    assert fit is not None and fit.latency.n == len(long) and fit.latency.dropped == len(short)
    assert "2 at or below it set aside" in fit.spans
    few = fit_reflection_latency(MarkedSpans([], proposals=long[:7] + short), stages, 2, "x")
    assert few is None  # 7 reflections are too few to fit
