"""Calibrating from adapter calls that timed none of their rollouts: each span a makespan.

The simulator's runs stand for recorded ones: a simulated stage is what an
adapter with batch_evaluate on a pool of W threads does with one gepa call
(its rollouts list-scheduled on W workers), and untimed_copy writes the run
as the recorder writes such an adapter's calls (each rollout spanning its
call, untimed). The truth is the simulator's lognormal; a real gepa run with
a plain thread-pool adapter is the slow test at the end.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gepa
import numpy as np
import pytest
import scipy.stats
from calibrate_helpers import TRUE, relative, untimed_copy, write_traces
from conftest import assert_user_error, run_pxn
from gepa.core.adapter import EvaluationBatch
from gepa.strategies.proposal_sampling import PxNSampling
from record_helpers import SEED, TRAIN, VAL, BatchLM, SerialAdapter, score

from pxn.calibrate.traces.makespan import SHAPES, SpanLikelihood, Spans
from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.runner.record import recording
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.schedule import makespan
from pxn.trace import Rollout
from pxn.trace_reading import read_trace

ROLLOUT = Distribution("lognorm", params={"s": 0.6, "scale": 2.0})
# The helpers' truth with a lognormal rollout, small enough for many runs.
TRUTH = TRUE.replace(budget=300, valset_size=10, trainset_size=30, workers=4, rollout=ROLLOUT)


def untimed_runs(directory: Path, shape: Shape, replicates: range, workers: int = 4):
    """(timed runs, the same runs as an untimed adapter records them)."""
    timed = write_traces(directory / "timed", TRUTH.replace(workers=workers), shape, replicates)
    untimed = [untimed_copy(p / "trace.jsonl", directory / "untimed" / p.name) for p in timed]
    return timed, untimed


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory):
    """Two 2x2 runs at W = 4: stages of up to 20 rollouts on 4 workers."""
    return untimed_runs(tmp_path_factory.mktemp("runs"), Shape(2, 2), range(2))


# ---- the likelihood --------------------------------------------------------


def test_a_call_within_its_pool_has_the_maximum_of_its_draws_as_its_span() -> None:
    """n <= w: the span's density is n F^(n-1) f exactly (scipy's lognormal)."""
    spans = np.array([0.7, 1.9, 3.3, 8.0])
    sizes = np.array([1, 3, 4, 2])
    likelihood = SpanLikelihood(Spans(spans, sizes, np.full(4, 4)), np.empty(0), np.empty(0))
    law = scipy.stats.lognorm(s=0.6, scale=2.0)
    expected = np.log(sizes) + (sizes - 1) * law.logcdf(spans) + law.logpdf(spans)
    assert likelihood(np.log(2.0), 0.6) == pytest.approx(expected.sum(), rel=1e-9)
    assert likelihood.span_cdf(np.log(2.0), 0.6) == pytest.approx(law.cdf(spans) ** sizes)


@pytest.mark.parametrize(
    ("n", "w", "s"), [(5, 4, 0.5), (12, 4, 0.5), (12, 4, 1.0), (40, 16, 0.8), (30, 1, 0.4)]
)
def test_the_surrogate_of_a_busy_pool_follows_the_simulators_makespans(n, w, s) -> None:
    """n > w: the skew-normal standing for log M1 against 4,000 makespans of the simulator's own
    list scheduling (independent of the surrogate's draws). Its cdf stays within 0.04 of
    theirs; the empirical cdf's own error at this size is under 0.026 with probability 0.99."""
    rng = np.random.default_rng([n, w])
    spans = np.array(
        [2.0 * makespan(list(np.exp(s * rng.standard_normal(n))), w) for _ in range(4000)]
    )
    likelihood = SpanLikelihood(
        Spans(spans, np.full(len(spans), n), np.full(len(spans), w)), np.empty(0), np.empty(0)
    )
    assert scipy.stats.kstest(likelihood.span_cdf(np.log(2.0), s), "uniform").statistic < 0.04


# ---- the round trip --------------------------------------------------------


def test_untimed_calls_recover_the_latency_a_timed_recording_gives(batched) -> None:
    """The same two runs, untimed: the lognormal comes back within its stated 95% intervals
    (a right fit misses one with probability 0.05; these seeds are fixed), and near the
    timed calibration's, which reads every rollout."""
    timed, untimed = batched
    cal = calibrate_traces(untimed)
    fit, u = cal.rollout, cal.untimed
    assert u is not None and u.calls == len(untimed_call_keys(untimed)) and u.timed == 0
    assert u.pools == {4: u.calls} and u.largest > 4 and u.fit.ks_pvalue > 0.01
    params = cal.scenario.rollout.params
    assert cal.scenario.rollout.dist == "lognorm" and cal.scenario.rollout_phases == {}
    for name, truth in ROLLOUT.params.items():
        assert fit.param_ci[name][0] < truth < fit.param_ci[name][1]
    assert fit.mean_ci[0] < ROLLOUT.mean() < fit.mean_ci[1]
    reference = calibrate_traces(timed).scenario.rollout
    assert relative(cal.scenario.rollout.mean(), reference.mean()) < 0.1
    assert relative(params["s"], 0.6) < 0.2
    # The untimed rollouts are no latencies: nothing else reads them as such.
    assert cal.concurrency.peak == 0
    assert all(e.what != "rollout" for e in cal.load_effects)
    assert "task" not in cal.slowdowns
    assert any("timed none of their" in note for note in cal.notes)


def untimed_call_keys(paths: list[Path]) -> set:
    calls = set()
    for i, path in enumerate(paths):
        for r in read_trace(path / "trace.jsonl").of(Rollout):
            calls.add((i, r.iteration, r.phase, r.start, r.end))
    return calls


def test_the_parameter_draws_refit_the_spans(batched) -> None:
    cal = calibrate_traces(batched[1], draws=30)
    draws = cal.scenario.uncertainty.draws
    s = np.array([d["rollout.s"] for d in draws])
    scale = np.array([d["rollout.scale"] for d in draws])
    assert len(s) == len(scale) == 30 and np.ptp(s) > 0 and np.ptp(scale) > 0
    # The draws spread about the point estimate, as far as its bootstrap interval says.
    low, high = cal.rollout.param_ci["scale"]
    assert low < np.median(scale) < high
    assert np.percentile(scale, 5) < cal.scenario.rollout.params["scale"] < np.percentile(scale, 95)


def test_timed_and_untimed_runs_are_fitted_together(tmp_path: Path) -> None:
    """A mixed calibration reads the timed rollouts beside the spans: one lognormal whose
    interval holds the truth and is narrower than the spans' alone."""
    timed, untimed = untimed_runs(tmp_path, Shape(1, 1), range(2))
    alone = calibrate_traces(untimed[1:])
    mixed = calibrate_traces([timed[0], untimed[1]])
    assert mixed.untimed is not None and mixed.untimed.timed == mixed.rollout.n > 0
    width = lambda fit: fit.mean_ci[1] - fit.mean_ci[0]  # noqa: E731
    assert width(mixed.rollout) < width(alone.rollout)
    assert mixed.rollout.mean_ci[0] < ROLLOUT.mean() < mixed.rollout.mean_ci[1]


def test_a_pool_as_large_as_every_call_reads_each_span_as_a_maximum(tmp_path: Path) -> None:
    """At W = 16 every stage fits its pool: exact likelihoods only."""
    _, untimed = untimed_runs(tmp_path, Shape(2, 2), range(2), workers=16)
    cal = calibrate_traces(untimed)
    assert cal.untimed.pools == {16: cal.untimed.calls}
    assert cal.rollout.mean_ci[0] < ROLLOUT.mean() < cal.rollout.mean_ci[1]


@pytest.mark.slow
def test_the_95_percent_intervals_cover_the_truth_as_often_as_they_say(tmp_path: Path) -> None:
    """Twenty independent single runs at W = 4, each calibrated from its spans alone: the mean's
    95% bootstrap interval holds the truth in at least 15 of them. A right interval fails
    that with probability 0.0026 (binomial(20, 0.95)); one that covers only 80% passes with
    probability 0.37."""
    _, untimed = untimed_runs(tmp_path, Shape(1, 1), range(20))
    inside = 0
    for path in untimed:
        fit = calibrate_traces([path]).rollout
        inside += fit.mean_ci[0] < ROLLOUT.mean() < fit.mean_ci[1]
    assert inside >= 15


# ---- W ---------------------------------------------------------------------


def test_without_w_calibration_asks_for_it_in_one_line(tmp_path: Path) -> None:
    _, untimed = untimed_runs(tmp_path, Shape(1, 1), range(1))
    undeclared = untimed_copy(untimed[0] / "trace.jsonl", tmp_path / "undeclared", workers=0)
    with pytest.raises(PxnError, match="timed none of its rollouts") as raised:
        calibrate_traces([undeclared])
    assert raised.value.subject == "workers"
    assert "recording(..., workers=W)" in str(raised.value)
    out = tmp_path / "out.toml"
    assert_user_error(
        run_pxn("calibrate", undeclared, "-o", out),
        "--workers is unknown for",
        "record with recording(..., workers=W), or give W here",
    )
    assert not out.exists()
    # Given, it stands for the W the recording did not declare.
    done = run_pxn("calibrate", undeclared, "-o", out, "--workers", "4", "--draws", "0")
    assert done.returncode == 0, done.stderr
    assert Scenario.load(out).workers == 4
    assert "setup: B=300, V=10, train=30, b=3, W=4" in done.stdout


# ---- a real gepa run, recorded with the one line -----------------------------


class SleepingPoolAdapter(SerialAdapter):
    """A plain adapter: batch_evaluate runs every example on a pool of `workers` threads, each
    sleeping a lognormal draw; it times nothing for the recorder, but keeps each rollout's
    duration for the test (what a timed recording would have written)."""

    def __init__(self, workers: int, latency: Distribution, seed: int):
        super().__init__()
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.draws = iter(latency.sample(np.random.default_rng(seed), 100_000).tolist())
        self.durations: list[float] = []

    def _one(self, seconds: float, candidate, example) -> float:
        start = time.perf_counter()
        time.sleep(seconds)
        self.durations.append(time.perf_counter() - start)
        return score(candidate, example)

    def evaluate(self, batch, candidate, capture_traces=False):
        return self.batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(self, items, **kwargs):
        jobs = [(c, ex, next(self.draws)) for c, batch in items for ex in batch]
        scores = list(self.pool.map(lambda job: self._one(job[2], job[0], job[1]), jobs))
        out, at = [], 0
        for _, batch in items:
            chunk, at = scores[at : at + len(batch)], at + len(batch)
            trajectories = [{"example": e, "score": s} for e, s in zip(batch, chunk, strict=True)]
            out.append(
                EvaluationBatch(outputs=list(batch), scores=chunk, trajectories=trajectories)
            )
        return out


@pytest.mark.slow
def test_a_plain_thread_pool_adapter_recorded_with_the_one_line_calibrates(tmp_path: Path):
    """Real gepa 0.1.4, 2x2, a pool of 3 threads sleeping lognormal rollouts (median 50 ms),
    nothing timed: the trace marks every call untimed, the recorder reports no mismatch, and
    the rollout mean fitted to the spans holds the mean of the durations the rollouts really
    slept (the sleeps' own lateness in both) within its stated 95% interval."""
    latency = Distribution("lognorm", params={"s": 0.5, "scale": 0.05})
    adapter = SleepingPoolAdapter(3, latency, seed=1)
    with recording(tmp_path / "run", workers=3) as rec:
        gepa.optimize(
            **rec.wrap(
                seed_candidate=SEED,
                trainset=TRAIN,
                valset=VAL,
                adapter=adapter,
                reflection_lm=BatchLM(),
                max_metric_calls=150,
                sampling_strategy=PxNSampling(2, 2),
                display_progress_bar=False,
            )
        )
    assert rec.result.status == "completed" and rec.result.mismatches == ()
    rollouts = read_trace(tmp_path / "run" / "trace.jsonl").of(Rollout)
    assert not any(r.timed for r in rollouts) and len(rollouts) == len(adapter.durations)
    cal = calibrate_traces([tmp_path / "run"])
    assert cal.scenario.workers == 3 and cal.untimed.calls == rec.result.untimed_calls
    low, high = cal.rollout.mean_ci
    assert low < np.mean(adapter.durations) < high
    assert SHAPES[0] < cal.scenario.rollout.params["s"] < SHAPES[-1]
