"""Workers split among a stage's candidates (worker_split = "per_candidate"), as dspy.GEPA's
adapter runs a stage: DSPy's own arithmetic, the schedule's rules call by call, exact stage
times, and the scenario key."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from dspy.teleprompt.gepa.gepa_utils import DspyAdapter
from sim_helpers import fixed, make_scenario, max_concurrency

from pxn.acceptance import Acceptance
from pxn.errors import PxnError
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.sim.schedule import Bucket, split_schedule, thread_shares
from pxn.trace import Rollout, Stage, TraceWriter
from pxn.trace_reading import read_trace


def last_end(starts: list[float], durations: list[float]) -> float:
    return max(s + d for s, d in zip(starts, durations, strict=True))


class ThreadsAsked:
    """Stands in for a DspyAdapter's self: its evaluate notes the threads DSPy gives it."""

    def __init__(self, num_threads: int):
        self.num_threads = num_threads
        self.given: list[tuple[int, int]] = []

    def evaluate(self, batch, candidate, capture_traces=False, num_threads=None):
        self.given.append((candidate["id"], num_threads))
        return None


@pytest.mark.parametrize("workers", [1, 2, 5, 8, 16])
@pytest.mark.parametrize("candidates", [1, 3, 4, 7, 20])
def test_the_shares_are_what_dspys_batch_evaluate_gives(workers: int, candidates: int) -> None:
    """DSPy 3.4.1's own batch_evaluate, run on an object that records its evaluations."""
    adapter = ThreadsAsked(workers)
    items = [({"id": c}, [f"x{c}"]) for c in range(candidates)]
    DspyAdapter.batch_evaluate(adapter, items)
    at_once, threads = thread_shares(candidates, workers)
    assert sorted(adapter.given) == list(enumerate(threads))
    assert at_once == min(candidates, workers)
    assert sum(threads[:at_once]) == workers


def test_fixed_latencies_give_each_candidate_its_rounds() -> None:
    """3 candidates of 4 calls on 5 workers: 2, 2 and 1 threads, so 2, 2 and 4 rounds."""
    starts, threads, durations, throttled = split_schedule([1.0] * 12, 4, 5, None, 0.0)
    assert last_end(starts, durations) == 4.0 and durations == [1.0] * 12 and throttled == 0
    assert starts == [0, 0, 1, 1] * 2 + [0, 1, 2, 3]
    assert threads[8:] == [4] * 4 and set(threads[:4]) == {0, 1} and set(threads[4:8]) == {2, 3}


def test_more_candidates_than_workers_queue_for_a_place() -> None:
    """5 candidates of 2 calls on 2 workers: one thread each, two candidates at a time."""
    draws = [1.0, 1.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    starts, threads, durations, _ = split_schedule(draws, 2, 2, None, 0.0)
    # candidate 0 ends at 2, 1 at 6; 2 takes 0's place (2-4), 3 follows (4-6), 4 takes 1's.
    assert starts == [0, 1, 0, 3, 2, 3, 4, 5, 6, 7]
    assert threads == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    assert last_end(starts, durations) == 8.0


def test_calls_holding_threads_are_paid_in_line_as_the_buckets_refill() -> None:
    """2 candidates of 3 calls on 4 workers (2 threads each), 1 request a second with 2 in
    the bucket: calls 0, 1, 3 and 4 take threads at 0 and queue in that order; the bucket
    pays 0 and 1 at once, then one a second. Call 2 takes its thread back at 1, so it
    queues behind 4 (pooled workers would have run the calls in order: 0, 0, 1, 2, 3, 4)."""
    bucket = Bucket(per_minute=60, burst_seconds=2)
    starts, threads, durations, throttled = split_schedule(
        [1.0] * 6, 3, 4, None, 0.0, start=0.0, charges=[(bucket, 1.0)]
    )
    assert starts == [0, 0, 3, 1, 2, 4] and durations == [1.0] * 6
    assert set(threads[:3]) == {0, 1} and threads[3:] == [2, 3, 2]  # its own threads
    assert throttled == 4  # each call that waited past getting its thread
    assert (bucket.level, bucket.time) == (0.0, 4.0)


@pytest.mark.parametrize("seed", range(40))
def test_each_call_follows_the_rules_of_a_split_stage(seed: int) -> None:
    """Random stages: a candidate's calls never exceed its threads, a thread serves one call
    at a time, at most min(candidates, W) candidates are under way, the servers are never
    oversubscribed, a call waits only while its threads or every server are busy, and each
    call is slowed by the calls in flight at its start."""
    rng = np.random.default_rng(seed)
    per_item, items = int(rng.integers(1, 6)), int(rng.integers(1, 12))
    workers = int(rng.integers(1, 10))
    servers = None if rng.random() < 0.5 else int(rng.integers(1, 6))
    beta = float(rng.choice([0.0, rng.uniform(0, 1)]))
    draws = rng.choice([1.0, 2.0, rng.exponential(1.5)], size=per_item * items).tolist()
    starts, threads, durations, _ = split_schedule(draws, per_item, workers, servers, beta)
    at_once, shares = thread_shares(items, workers)
    ends = [s + d for s, d in zip(starts, durations, strict=True)]
    spans = list(zip(starts, ends, strict=True))
    of = [range(i * per_item, (i + 1) * per_item) for i in range(items)]
    for i, calls in enumerate(of):
        assert max_concurrency([spans[c] for c in calls]) <= shares[i]
    for thread in set(threads):
        assert max_concurrency([spans[c] for c in range(len(draws)) if threads[c] == thread]) <= 1
    lives = [(min(starts[c] for c in calls), max(ends[c] for c in calls)) for calls in of]
    assert max_concurrency(lives) <= at_once
    if servers is not None:
        assert max_concurrency(spans) <= servers
    for c, start in enumerate(starts):
        in_flight = sum(starts[j] <= start < ends[j] for j in range(len(draws)))
        assert durations[c] == pytest.approx(draws[c] * (1 + beta * (in_flight - 1)), rel=1e-12)
        i = c // per_item
        if start > lives[i][0]:  # it waited: a thread of its own or a server freed just then
            assert any(math.isclose(ends[j], start) for j in range(len(draws))), c


def traced_stages(scenario: Scenario, shape: Shape, tmp_path: Path):
    path = tmp_path / "run.jsonl"
    with TraceWriter(path) as writer:
        simulate_once(scenario, shape, 0, writer)
    return read_trace(path)


def test_a_split_stage_lasts_its_slowest_candidates_rounds(tmp_path: Path) -> None:
    """4x1 on 6 workers, b = 3: the parent and child stages give 2, 2, 1 and 1 threads, so
    3 rounds (pooled: 12 rollouts on 6 workers, 2); one child validated on V = 20 has all 6
    (4 rounds), and the seed's validation uses all W as gepa's evaluate does."""
    te = 2.0
    pooled = make_scenario(
        rollout=fixed(te),
        reflection=fixed(5.0),
        workers=6,
        acceptance=Acceptance(1.0),
        selection="best",
        stage_overhead=0.0,
        budget=300,
    )
    split = pooled.replace(worker_split="per_candidate")
    expected = {
        "seed_val": 4 * te,
        "parent_minibatch": 3 * te,
        "child_minibatch": 3 * te,
        "full_val": 4 * te,
        "reflection": 5.0,
    }
    trace = traced_stages(split, Shape(4, 1), tmp_path)
    for stage in trace.of(Stage):
        assert stage.duration == pytest.approx(expected[stage.name]), stage
    assert max_concurrency([(r.start, r.end) for r in trace.of(Rollout)]) <= 6
    assert {r.worker for r in trace.of(Rollout)} == set(range(6))
    slower = simulate_once(split, Shape(4, 1), 0).wall_clock
    assert slower > simulate_once(pooled, Shape(4, 1), 0).wall_clock


def test_a_pooled_scenario_is_unchanged_and_the_key_round_trips(tmp_path: Path) -> None:
    scenario = make_scenario()
    assert "worker_split" not in scenario.to_dict()
    split = scenario.replace(worker_split="per_candidate")
    path = tmp_path / "s.toml"
    split.save(path)
    assert Scenario.load(path).worker_split == "per_candidate"
    assert 'worker_split = "per_candidate"' in path.read_text()


def test_an_unknown_split_is_refused() -> None:
    refusal = "worker_split must be one of 'pooled', 'per_candidate': got 'dspy'"
    with pytest.raises(PxnError, match=refusal):
        make_scenario(worker_split="dspy")
