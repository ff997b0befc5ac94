"""Real gepa against the real local LM pool (llama.cpp + SmolLM2-135M), small budgets.

Asserts the runner's invariants on real traces: the trace's totals equal
gepa's, never more than W rollouts at once, the stages of each iteration in
gepa's order, reflections of a 2x2 step overlapping each other and never a
rollout. No timing is asserted.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import pytest
from record_helpers import check_prefixes

from pxn.runner.recording.totals import trace_totals
from pxn.runner.run import RunConfig, run_gepa
from pxn.trace import STAGES, Reflection, Rollout, RunEnd, Stage
from pxn.trace_reading import read_trace

pytestmark = pytest.mark.lm


def overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


def check_run(out, workers: int):
    result = json.loads((out / "result.json").read_text())
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == []
    assert isinstance(trace.events[-1], RunEnd) and trace.events[-1].status == "completed"
    totals = trace_totals(trace)
    assert totals.metric_calls == result["metric_calls"]
    assert totals.full_val_evals == result["full_val_evals"]
    assert totals.accepted == result["accepted"]
    assert totals.max_concurrent <= workers
    assert result["trace_check"] == "ok"
    # Every rollout sits on one of the W slots and is tagged with a known phase.
    rollouts = trace.of(Rollout)
    assert {r.worker for r in rollouts} <= set(range(workers))
    assert all(r.error is None for r in rollouts)
    # Stages of each iteration run in gepa's order, one after the other.
    by_iteration = defaultdict(list)
    for stage in trace.of(Stage):
        by_iteration[stage.iteration].append(stage)
    assert [s.name for s in by_iteration[0]] == ["seed_val"]
    for iteration, stages in by_iteration.items():
        ordered = sorted(stages, key=lambda s: s.start)
        names = [s.name for s in ordered]
        assert names == sorted(names, key=STAGES.index), (iteration, names)
        for earlier, later in itertools.pairwise(ordered):
            assert earlier.end <= later.start
    # Each rollout lies inside a stage of its own phase and iteration.
    for r in rollouts:
        assert any(
            s.name == r.phase and s.start <= r.start and r.end <= s.end
            for s in by_iteration[r.iteration]
        )
    # Reflections never overlap a rollout.
    reflections = trace.of(Reflection)
    assert reflections
    assert not any(overlap(f, r) for f in reflections for r in rollouts)
    return result, trace


def test_single_run(tmp_path, lm_pool):
    out = tmp_path / "single"
    run = run_gepa(
        RunConfig(out=str(out), shape="1x1", budget=24, workers=2, progress=False), pool=lm_pool
    )
    assert run.status == "completed", run.message
    result, trace = check_run(out, workers=2)
    assert result["iterations"] >= 1
    assert all(f.slot == 0 for f in trace.of(Reflection))


def test_2x2_run(tmp_path, lm_pool):
    out = tmp_path / "2x2"
    run = run_gepa(
        RunConfig(out=str(out), shape="2x2", budget=40, workers=2, progress=False), pool=lm_pool
    )
    assert run.status == "completed", run.message
    _, trace = check_run(out, workers=2)
    reflections = trace.of(Reflection)
    # The P*N reflections of a step run concurrently, on distinct slots.
    pairs = [
        (a, b)
        for i, a in enumerate(reflections)
        for b in reflections[i + 1 :]
        if a.iteration == b.iteration
    ]
    assert pairs, "no iteration reflected more than once"
    assert any(overlap(a, b) and a.slot != b.slot for a, b in pairs)
    # Siblings share their parent's prompt prefix: all but each parent's first count it.
    assert check_prefixes(reflections) > 0
