"""Acceptance (Wilson, decay by MLE and LR test), tokens, overhead and concurrency."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from calibrate_helpers import TRUE, write_traces

from pxn.calibrate.traces.acceptance import DECAY_PERMUTATIONS, fit_acceptance
from pxn.calibrate.traces.acceptance_likelihood import Steps
from pxn.calibrate.traces.overhead import fit_concurrency, fit_load_effects, fit_overhead, in_flight
from pxn.calibrate.traces.tokens import fit_tokens
from pxn.calibrate.traces.units import cut_into_units
from pxn.errors import PxnError
from pxn.shape import Shape
from pxn.trace import Decision, Reflection, Resume, Rollout, RunStart
from pxn.trace_reading import Trace, read_one


def bernoulli(p: np.ndarray, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(len(p)) < p).astype(float)


def one_by_one(*runs: np.ndarray) -> Steps:
    """Runs of single-proposal steps (shape 1x1): step i was made after i proposals."""
    made = np.concatenate([np.arange(len(r)) for r in runs])
    return Steps.of(made, np.ones(len(made)), np.concatenate(runs))


def test_constant_acceptance_is_kept_with_its_wilson_interval() -> None:
    outcomes = bernoulli(np.full(400, 0.2), seed=1)
    fit = fit_acceptance(one_by_one(outcomes))
    assert fit.chosen.tau is None
    assert fit.chosen.a0 == pytest.approx(outcomes.mean())
    expected = scipy.stats.binomtest(int(outcomes.sum()), 400).proportion_ci(method="wilson")
    assert fit.wilson == pytest.approx((expected.low, expected.high))
    assert fit.wilson[0] < 0.2 < fit.wilson[1]
    assert fit.lr_pvalue > 0.05


def test_decay_is_found_and_fitted() -> None:
    i = np.arange(800)
    outcomes = bernoulli(0.6 * np.exp(-i / 200), seed=2)
    fit = fit_acceptance(one_by_one(outcomes))
    # No rearrangement of the steps reaches the statistic: the smallest p.
    assert fit.chosen.tau is not None and fit.lr_pvalue == 1 / (DECAY_PERMUTATIONS + 1)
    assert fit.chosen.decay_until == 799  # the last step was made after 799 proposals
    assert fit.chosen.a0 == pytest.approx(0.6, abs=0.1)
    assert 130 < fit.chosen.tau < 300


def test_proposal_index_restarts_with_each_run() -> None:
    """Two decaying runs: the decay is over each run's own proposals, not their concatenation."""
    i = np.arange(300)
    runs = [bernoulli(0.6 * np.exp(-i / 80), seed=s) for s in (3, 4)]
    fit = fit_acceptance(one_by_one(*runs))
    assert fit.chosen.tau is not None
    assert 50 < fit.chosen.tau < 130  # one long run of 600 would give a very different tau


def test_all_or_nothing_and_no_proposals() -> None:
    assert fit_acceptance(one_by_one(np.ones(10))).chosen.a0 == 1.0
    assert fit_acceptance(one_by_one(np.zeros(10))).chosen.a0 == 0.0
    with pytest.raises(PxnError, match="no judged proposals"):
        fit_acceptance(one_by_one(np.empty(0)))


def test_latency_against_tokens_out() -> None:
    rng = np.random.default_rng(5)
    tokens = rng.integers(20, 400, size=150)
    seconds = 0.8 + 0.015 * tokens + rng.normal(0, 0.2, size=150)
    seconds[:5] += 30  # stalls: a robust fit ignores them
    events = [
        Reflection(start=0.0, end=float(s), iteration=1, slot=0, proposal="1-0", parent="0",
                   tokens_out=int(t))
        for t, s in zip(tokens, seconds, strict=True)
    ]  # fmt: skip
    fit = fit_tokens("reflection", events)
    assert fit is not None
    assert fit.per_token == pytest.approx(0.015, rel=0.1)
    assert fit.overhead == pytest.approx(0.8, abs=0.3)
    assert fit.per_token_ci[0] < 0.015 < fit.per_token_ci[1]
    assert fit_tokens("reflection", events[:3]) is None  # too few
    assert fit_tokens("rollout", [e for e in events if False]) is None


def test_overhead_and_concurrency_from_a_simulated_run(tmp_path: Path) -> None:
    [run] = write_traces(tmp_path, TRUE.replace(stage_overhead=0.35), Shape(2, 2), range(1))
    trace = read_one(run)
    overhead = fit_overhead([trace])
    assert overhead.per_stage == pytest.approx(0.35, rel=1e-6)
    assert list(overhead.gap_by_stage.values()) == pytest.approx([0.35] * 5, rel=1e-6)
    concurrency = fit_concurrency([trace])
    assert concurrency.peak == TRUE.workers  # full validation of V=20 fills W=8
    assert concurrency.reflection_peak == 4  # k = 4 reflections at once
    assert 0 < concurrency.busy_share <= 1
    effects = {e.what: e for e in fit_load_effects([trace])}
    assert not effects["rollout"].significant  # simulated latencies ignore load
    assert abs(effects["rollout"].spearman) < 0.2
    assert sum(n for n, _ in effects["rollout"].by_load.values()) == len(trace.of(Rollout))


def test_a_latency_growing_with_load_is_flagged() -> None:
    """Calls on a shared CPU: each in-flight call adds a second to the next one's latency."""
    rng = np.random.default_rng(8)
    start = RunStart(start=0.0, end=0.0, source="runner", shape="1x1", budget=10, workers=4,
                     reflection_concurrency=1, valset_size=1, trainset_size=3, minibatch=1,
                     seed=0)  # fmt: skip
    events: list = [start]
    t = 0.0
    for batch in range(60):
        width = 1 + batch % 4  # 1 to 4 calls at once
        for w in range(width):
            latency = float(rng.gamma(4.0, 0.25)) + 1.0 * (width - 1)
            events.append(Rollout(start=t, end=t + latency, iteration=batch, phase="full_val",
                                  worker=w, candidate="0", example=str(w)))  # fmt: skip
        t += 30.0
    [rollout] = [e for e in fit_load_effects([Trace(Path("x"), events)]) if e.what == "rollout"]
    assert rollout.significant
    assert rollout.slope == pytest.approx(1.0, abs=0.25)
    assert rollout.by_load[4][1] > rollout.by_load[1][1] + 2


def test_in_flight_counts_back_to_back_calls_once() -> None:
    starts = np.array([0.0, 1.0, 1.0, 2.5])
    ends = np.array([1.0, 2.0, 3.0, 3.0])
    assert in_flight(starts, ends, np.array([0.5, 1.0, 2.0, 2.7])).tolist() == [1, 2, 1, 2]


def test_decisions_a_resume_threw_away_are_not_counted() -> None:
    def decision(iteration: int, accepted: bool) -> Decision:
        return Decision(start=0.0, end=0.0, iteration=iteration, proposal=f"{iteration}-0",
                        parent="0", accepted=accepted)  # fmt: skip

    start = RunStart(start=0.0, end=0.0, source="runner", shape="1x1", budget=10, workers=1,
                     reflection_concurrency=1, valset_size=1, trainset_size=3, minibatch=1,
                     seed=0)  # fmt: skip
    events = [
        start,
        decision(1, True),
        decision(2, False),
        decision(3, True),  # lost: the saved state holds iterations 1-2 only
        Resume(start=5.0, end=5.0, iteration=2, metric_calls=7),
        decision(3, False),
        decision(4, False),
    ]
    trace = Trace(Path("resumed.jsonl"), events)
    steps = cut_into_units([trace]).steps
    assert steps.passed.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert steps.made.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_dspy_recorded_run_calibrates_to_split_workers(tmp_path: Path) -> None:
    """A trace whose run_start says it was recorded from dspy.GEPA gets worker_split =
    per_candidate (DSPy splits num_threads among a stage's candidates); others stay pooled;
    a mix takes the first trace's and says so."""
    import json

    from pxn.api.calibration_report import calibration_header
    from pxn.calibrate.traces.pipeline import calibrate_traces

    runs = write_traces(tmp_path, TRUE.replace(budget=300), Shape(2, 2), range(2))
    assert calibrate_traces(runs).scenario.worker_split == "pooled"
    trace = runs[0] / "trace.jsonl"
    lines = trace.read_text().splitlines()
    start = json.loads(lines[0])
    start["meta"]["dspy"] = "3.4.1"
    trace.write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n")
    mixed = calibrate_traces(runs)
    assert mixed.scenario.worker_split == "per_candidate"
    assert any("differ in how their workers served candidates" in n for n in mixed.notes)
    dspy_only = calibrate_traces(runs[:1])
    assert dspy_only.scenario.worker_split == "per_candidate"
    assert "worker_split=per_candidate" in calibration_header(dspy_only)
