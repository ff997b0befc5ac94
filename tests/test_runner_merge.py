"""gepa's merge, recorded: the real gepa 0.1.4 with use_merge=True on plain parts that merge
(merge_helpers.py), the trace checked against gepa's own counts and its own record of the
merges (the state's full_program_trace); the simulator's merge schedule against gepa's on the
same run; and `pxn run --merge`'s engine on the same task with synthetic latencies."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import gepa
import numpy as np
import pytest
from gepa.core.state import GEPAState
from gepa.strategies.proposal_sampling import PxNSampling
from merge_helpers import (
    SEED,
    TRAIN,
    VAL,
    AlikeLM,
    AlikeReflectionModel,
    MergingAdapter,
    merging_task,
    score,
)
from sim_helpers import fixed, make_scenario

from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.checks.synthetic import SleepingModel
from pxn.runner.config import Plan, RunConfig
from pxn.runner.record import recording
from pxn.runner.run import run_engine
from pxn.sim.merge import MergeSchedule
from pxn.trace import Decision, Merge, NoProposal, Reflection, Rollout, Stage, Validation
from pxn.trace_reading import Trace, read_trace

# gepa's seed 3 at this budget: two merges accepted and two rejected (their parents clash).
GEPA_SEED = 3
BUDGET = 250


def merging_run(out: Path, max_merges: int = 5) -> tuple[object, object, Trace, GEPAState]:
    with recording(out, workers=1) as rec:  # a serial adapter: one rollout at a time
        result = gepa.optimize(
            **rec.wrap(
                seed_candidate=SEED,
                trainset=TRAIN,
                valset=VAL,
                adapter=MergingAdapter(),
                reflection_lm=AlikeLM(),
                max_metric_calls=BUDGET,
                # Two parents an iteration: the seed's two children improve one component each.
                sampling_strategy=PxNSampling(2, 2),
                use_merge=True,
                max_merge_invocations=max_merges,
                display_progress_bar=False,
                seed=GEPA_SEED,
            )
        )
    return rec.result, result, read_trace(out / "trace.jsonl"), GEPAState.load(str(out / "gepa"))


def test_a_run_that_merges_is_recorded_as_gepa_ran_it(tmp_path):
    run, result, trace, state = merging_run(tmp_path / "run")
    assert run.status == "completed" and run.mismatches == (), run
    assert trace.skipped == []
    merges = trace.of(Merge)
    assert [m.accepted for m in merges].count(True) >= 1
    assert [m.accepted for m in merges].count(False) >= 1
    # Every metric call one rollout, the merges' included; every new candidate accounted for.
    assert len(trace.of(Rollout)) == result.total_metric_calls == run.metric_calls
    assert (run.merges, run.merges_accepted) == (len(merges), sum(m.accepted for m in merges))
    assert run.accepted + run.merges_accepted == result.num_candidates - 1
    start = trace.run_start
    assert start.meta["use_merge"] is True and start.meta["max_merge_invocations"] == 5
    assert start.meta["components"] == 2

    # gepa's own record of the iterations it merged in: parents, ancestor, its subsample.
    record = state.full_program_trace  # gepa's own, one entry an iteration
    gepa_merged = {entry["i"] + 1: entry for entry in record if entry.get("merged")}
    assert sorted(gepa_merged) == [m.iteration for m in merges]
    rollouts = defaultdict(list)
    for r in trace.of(Rollout):
        rollouts[r.iteration, r.phase].append(r)
    validated = {v.candidate for v in trace.of(Validation)}
    for merge in merges:
        entry = gepa_merged[merge.iteration]
        first, second, ancestor = entry["merged_entities"]
        assert (merge.parents, merge.ancestor) == (f"{first},{second}", str(ancestor))
        # The subsample: gepa's examples, the merged program's scores, the parents' known ones.
        subsample = rollouts[merge.iteration, "merge_subsample"]
        assert [r.example for r in subsample] == [f"val/{i}" for i in entry["subsample_ids"]]
        assert {r.candidate for r in subsample} == {merge.proposal}
        assert merge.score_after == sum(r.score for r in subsample)
        parents = [state.program_candidates[p] for p in (first, second)]
        sums = [sum(score(p, VAL[i]) for i in entry["subsample_ids"]) for p in parents]
        assert merge.score_before == max(sums)
        assert merge.accepted == (merge.score_after >= merge.score_before)
        # The merge took the iteration: no proposal; accepted, a full validation.
        assert not [e for e in trace.of(Decision) + trace.of(Reflection)
                    if e.iteration == merge.iteration]  # fmt: skip
        full = rollouts[merge.iteration, "full_val"]
        if merge.accepted:
            assert state.parent_program_for_candidate[int(merge.candidate)] == [first, second]
            assert merge.candidate in validated
            assert {r.candidate for r in full} == {merge.proposal} and len(full) == len(VAL)
        else:
            assert merge.candidate is None and not full
    # Each rollout lies inside a stage of its own phase and iteration.
    stages = trace.of(Stage)
    for r in trace.of(Rollout):
        assert any(
            (s.name, s.iteration) == (r.phase, r.iteration) and s.start <= r.start <= r.end <= s.end
            for s in stages
        ), r


def test_a_merge_that_finds_no_pair_is_told_and_the_iteration_proposes(tmp_path):
    """One proposal an iteration: the first child accepted descends from the seed, so the merge
    then due finds no pair (gepa logs it and proposes as usual); the trace says so."""
    out = tmp_path / "run"
    with recording(out, workers=1) as rec:
        gepa.optimize(
            **rec.wrap(
                seed_candidate=SEED,
                trainset=TRAIN,
                valset=VAL,
                adapter=MergingAdapter(),
                reflection_lm=AlikeLM(),
                max_metric_calls=150,
                use_merge=True,
                display_progress_bar=False,
                seed=GEPA_SEED,
            )
        )
    trace, state = read_trace(out / "trace.jsonl"), GEPAState.load(str(out / "gepa"))
    looked = {e["i"] + 1 for e in state.full_program_trace if e.get("invoked_merge")}
    merged = {e["i"] + 1 for e in state.full_program_trace if e.get("merged")}
    not_found = [e for e in trace.of(NoProposal) if e.reason == "merge_not_found"]
    assert not_found and {e.iteration for e in not_found} == looked - merged
    assert all(e.proposal == f"{e.iteration}-merge" for e in not_found)
    decided = {d.iteration for d in trace.of(Decision)}
    assert {e.iteration for e in not_found} <= decided  # the iteration went on to propose


@pytest.mark.parametrize("max_merges", [5, 1])
def test_the_simulators_merge_schedule_is_gepas(tmp_path, max_merges):
    """Told what each iteration of a real run did (a merge found and judged, or the children
    its proposals added), the simulator's schedule tries a merge at the top of exactly
    the iterations where gepa did (found or not: gepa's own record says it looked)."""
    run, _, trace, state = merging_run(tmp_path / "run", max_merges)
    looked = {entry["i"] + 1 for entry in state.full_program_trace if entry.get("invoked_merge")}
    judged = {m.iteration: m.accepted for m in trace.of(Merge)}
    added = Counter(d.iteration for d in trace.of(Decision) if d.accepted)
    assert looked and judged
    schedule, tried = MergeSchedule(max_merges), set()
    for iteration in range(1, run.iterations + 1):
        if schedule.try_now():
            tried.add(iteration)
        if iteration in judged:
            schedule.merged(judged[iteration])
        else:
            schedule.joined(added[iteration])
    assert tried == looked


def test_pxn_run_merge_records_the_engines_merges(tmp_path):
    """`pxn run --merge`'s engine (run_engine, the runner's adapter of W workers and its
    reflection LM) on the merging task, both models sleeping fixed latencies: gepa's merges
    are in the trace, and its totals are gepa's."""
    scenario = make_scenario(
        budget=BUDGET,
        valset_size=len(VAL),
        trainset_size=len(TRAIN),
        workers=3,
        rollout=fixed(0.001),
        reflection=fixed(0.002),
    )
    out = tmp_path / "run"
    config = RunConfig(
        out=str(out), shape="2x2", budget=BUDGET, workers=3, seed=GEPA_SEED, progress=False,
        merge=True, max_merges=3,
    )  # fmt: skip
    plan = Plan(2, 2, merging_task(), reflection_concurrency=4, max_failures=20, budget=BUDGET)
    rng = np.random.default_rng(0)
    result = run_engine(
        config, plan, SleepingModel(scenario, rng), AlikeReflectionModel(scenario, rng)
    )
    assert result.status == "completed" and result.warnings == [], result
    trace = read_trace(out / "trace.jsonl")
    meta = trace.run_start.meta
    assert (meta["use_merge"], meta["max_merge_invocations"], meta["components"]) == (True, 3, 2)
    merges = trace.of(Merge)
    assert merges and result.result["metric_calls"] == len(trace.of(Rollout))
    assert result.result["merges"] == len(merges)
    assert result.result["merges_accepted"] == sum(m.accepted for m in merges)
    subsample = [r for r in trace.of(Rollout) if r.phase == "merge_subsample"]
    assert len(subsample) == 5 * len(merges)
    assert {r.candidate for r in subsample} == {m.proposal for m in merges}
    assert all(r.example.startswith("val/") for r in subsample)


def test_a_recorded_run_that_merges_calibrates_its_merge(tmp_path):
    run, _, _, _ = merging_run(tmp_path / "run")
    scenario = calibrate_traces([tmp_path / "run"], search="rates").scenario
    assert (scenario.merge, scenario.max_merges, scenario.components) == (True, 5, 2)
    assert scenario.merge_acceptance == (run.merges_accepted + 1) / (run.merges + 2)
