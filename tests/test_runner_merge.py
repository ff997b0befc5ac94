"""gepa's merge, recorded: the real gepa 0.1.4 with use_merge=True on plain parts that merge
(merge_helpers.py), the trace checked against gepa's own counts and its own record of the
merges (the state's full_program_trace)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import gepa
from gepa.core.state import GEPAState
from gepa.strategies.proposal_sampling import PxNSampling
from merge_helpers import SEED, TRAIN, VAL, AlikeLM, MergingAdapter, score

from pxn.runner.record import recording
from pxn.trace import Decision, Merge, Reflection, Rollout, Stage, Trace, Validation, read_trace

# gepa's seed 3 at this budget: two merges accepted and two rejected (their parents clash).
GEPA_SEED = 3
BUDGET = 250


def merging_run(out: Path) -> tuple[object, object, Trace, GEPAState]:
    with recording(out) as rec:
        result = gepa.optimize(
            **rec.wrap(
                seed_candidate=SEED,
                trainset=TRAIN,
                valset=VAL,
                adapter=MergingAdapter(),
                reflection_lm=AlikeLM(),
                max_metric_calls=BUDGET,
                # Two parents a step: the seed's two children improve one component each.
                sampling_strategy=PxNSampling(2, 2),
                use_merge=True,
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
    gepa_merged = {step["i"] + 1: step for step in state.full_program_trace if step.get("merged")}
    assert sorted(gepa_merged) == [m.iteration for m in merges]
    rollouts = defaultdict(list)
    for r in trace.of(Rollout):
        rollouts[r.iteration, r.phase].append(r)
    validated = {v.candidate for v in trace.of(Validation)}
    for merge in merges:
        step = gepa_merged[merge.iteration]
        first, second, ancestor = step["merged_entities"]
        assert (merge.parents, merge.ancestor) == (f"{first},{second}", str(ancestor))
        # The subsample: gepa's examples, the merged program's scores, the parents' known ones.
        subsample = rollouts[merge.iteration, "merge_subsample"]
        assert [r.example for r in subsample] == [f"val/{i}" for i in step["subsample_ids"]]
        assert {r.candidate for r in subsample} == {merge.proposal}
        assert merge.score_after == sum(r.score for r in subsample)
        parents = [state.program_candidates[p] for p in (first, second)]
        sums = [sum(score(p, VAL[i]) for i in step["subsample_ids"]) for p in parents]
        assert merge.score_before == max(sums)
        assert merge.accepted == (merge.score_after >= merge.score_before)
        # The merge took the iteration: no reflective step; accepted, a full validation.
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
