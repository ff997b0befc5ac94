"""Recording gepa as its docs lead with: optimize_anything (its three modes, batch_evaluator,
refiner, stop conditions) and gepa.optimize with task_lm (gepa's default adapter), each with
the one line, on the real gepa 0.1.4 with plain Python parts (anything_helpers.py); the trace
checked against gepa's own counts, and the run against the same run unrecorded."""

from __future__ import annotations

from pathlib import Path

import gepa
import gepa.optimize_anything as gepa_anything
import numpy as np
import pytest
from anything_helpers import (
    DEFAULT_TRAIN,
    DEFAULT_VAL,
    Reached,
    RefinerLM,
    StopFileAt,
    TaskModel,
    evaluate,
    evaluate_batch,
    evaluate_one,
)
from conftest import assert_user_error, run_pxn
from gepa.optimize_anything import (
    EngineConfig,
    GEPAConfig,
    MergeConfig,
    RefinerConfig,
    ReflectionConfig,
    optimize_anything,
)
from gepa.strategies.proposal_sampling import PxNSampling
from gepa.utils import NoImprovementStopper, ScoreThresholdStopper, TimeoutStopCondition
from record_helpers import SEED, TRAIN, VAL, BatchLM, CallableLM, Counting
from sim_helpers import fixed, make_scenario

from pxn.checks.synthetic import SleepingModel, SyntheticReflectionModel, synthetic_task
from pxn.errors import PxnError
from pxn.run_summary import summarize
from pxn.runner.config import Plan, RunConfig
from pxn.runner.record import recording
from pxn.runner.run import run_engine
from pxn.trace import Reflection, Rollout
from pxn.trace_reading import read_trace

OriginalAdapter = gepa_anything.OptimizeAnythingAdapter


def config(*, lm=None, sampling=(2, 2), workers=3, **engine) -> GEPAConfig:
    return GEPAConfig(
        engine=EngineConfig(
            max_metric_calls=engine.pop("max_metric_calls", 80),
            max_workers=workers,
            sampling_strategy=PxNSampling(*sampling),
            **engine,
        ),
        reflection=ReflectionConfig(reflection_lm=lm if lm is not None else BatchLM()),
    )


def anything(**kw):
    return {
        "seed_candidate": dict(SEED),
        "evaluator": evaluate,
        "dataset": TRAIN,
        "valset": VAL,
        "config": config(),
        **kw,
    }


def record_anything(out: Path, rec_kw=None, **kw):
    with recording(out, **(rec_kw or {})) as rec:
        result = optimize_anything(**rec.wrap(**anything(**kw)))
    return rec, result, read_trace(out / "trace.jsonl")


def checked(rec, result, trace) -> None:
    """The recorder's contract: completed, the trace's totals equal to gepa's."""
    run = rec.result
    assert run.status == "completed" and run.mismatches == (), run
    assert trace.skipped == []
    assert run.metric_calls == result.total_metric_calls
    assert run.accepted == result.num_candidates - 1
    assert gepa_anything.OptimizeAnythingAdapter is OriginalAdapter  # the seam is gone


def test_optimize_anything_is_recorded_with_one_line_and_runs_as_unrecorded(tmp_path):
    mine = Counting()
    user_config = config(sampling=(2, 2))
    user_config.callbacks = [mine]
    rec, result, trace = record_anything(tmp_path / "run", config=user_config)
    checked(rec, result, trace)
    # Every evaluator call is one timed rollout with its score: one per metric call.
    rollouts = trace.of(Rollout)
    assert len(rollouts) == result.total_metric_calls and all(r.timed for r in rollouts)
    assert all(r.score in (0.0, 1.0) for r in rollouts)
    assert {r.phase for r in rollouts} == {
        "seed_val", "parent_minibatch", "child_minibatch", "full_val"
    }  # fmt: skip
    assert all("?" not in r.example and "?" not in r.candidate for r in rollouts)
    assert len(trace.of(Reflection)) == rec.result.reflection_calls > 0
    start = trace.run_start
    assert (start.shape, start.budget, start.workers, start.minibatch) == ("2x2", 80, 3, 3)
    assert (start.valset_size, start.trainset_size) == (len(VAL), len(TRAIN))
    assert start.meta["api"] == "optimize_anything" and start.meta["mode"] == "generalization"
    assert "not_modelled" not in start.meta
    calls = result.total_metric_calls
    assert trace.run_end.message == f"ended by max_metric_calls: {calls} metric calls of 80"
    assert mine.iterations == rec.result.iterations  # the user's callback still sees all
    # The user's config is the user's: optimize_anything wrote into the recording's copy.
    assert user_config.engine.run_dir is None and user_config.callbacks == [mine]
    assert user_config.reflection.reflection_minibatch_size is None
    # The same run unrecorded: the same candidates, scores and metric calls.
    bare = optimize_anything(**anything(config=config(sampling=(2, 2))))
    assert bare.candidates == result.candidates
    assert bare.val_aggregate_scores == result.val_aggregate_scores
    assert bare.total_metric_calls == result.total_metric_calls


def test_a_multi_task_search_validates_on_its_dataset(tmp_path):
    rec, result, trace = record_anything(tmp_path / "run", valset=None)
    checked(rec, result, trace)
    start = trace.run_start
    assert start.meta["mode"] == "multi-task search"
    assert start.valset_size == start.trainset_size == len(TRAIN)
    val = {r.example for r in trace.of(Rollout) if r.phase == "seed_val"}
    assert val == {f"val/{i}" for i in range(len(TRAIN))}


def test_a_single_task_search_is_one_example_and_says_what_is_not_modelled(tmp_path):
    rec, result, trace = record_anything(
        tmp_path / "run",
        seed_candidate="w0",
        evaluator=evaluate_one,
        dataset=None,
        valset=None,
        config=config(sampling=(1, 1), max_metric_calls=12),
    )
    checked(rec, result, trace)
    assert result.best_candidate.startswith("w0 w1")  # a text in, a text out, as gepa gives
    start = trace.run_start
    assert (start.valset_size, start.trainset_size, start.minibatch) == (1, 1, 1)
    assert start.meta["mode"] == "single-task search"
    assert any("single-task" in line for line in start.meta["not_modelled"])
    assert {r.example for r in trace.of(Rollout)} == {"train/0", "val/0"}
    assert max(r.score for r in trace.of(Rollout)) > 1  # the evaluator's own scale


def test_a_batch_evaluator_gets_each_stage_in_one_call_and_its_rollouts_span_it(tmp_path):
    rec, result, trace = record_anything(
        tmp_path / "run", evaluator=None, batch_evaluator=evaluate_batch
    )
    checked(rec, result, trace)
    rollouts = trace.of(Rollout)
    assert not any(r.timed for r in rollouts) and rec.result.untimed_calls > 0
    # W is the batch evaluator's own, unknown unless declared.
    assert trace.run_start.workers == 0 and trace.run_start.meta["evaluator"] == "batch_evaluator"
    rec, _, trace = record_anything(
        tmp_path / "declared", rec_kw={"workers": 4}, evaluator=None, batch_evaluator=evaluate_batch
    )
    assert trace.run_start.workers == 4


def test_a_refined_example_is_one_rollout_and_gepa_counts_its_evaluations(tmp_path):
    refiner = RefinerLM()
    cfg = config(sampling=(1, 1), max_metric_calls=60)
    cfg.refiner = RefinerConfig(refiner_lm=refiner, max_refinements=2)
    rec, result, trace = record_anything(tmp_path / "run", config=cfg)
    checked(rec, result, trace)
    run = rec.result
    assert refiner.calls > 0
    # One rollout per example of each adapter call; gepa's count adds the refined
    # evaluations of the minibatches, which the message says and the check takes in.
    rollouts = trace.of(Rollout)
    assert len(rollouts) < result.total_metric_calls == run.metric_calls
    extra = result.total_metric_calls - len(rollouts)
    assert f"gepa counted {extra} more metric calls" in trace.run_end.message
    assert trace.run_end.metric_calls == result.total_metric_calls
    assert all(r.timed for r in rollouts)
    start = trace.run_start
    assert start.meta["refiner"] == {"max_refinements": 2}
    assert any("RefinerConfig" in line for line in start.meta["not_modelled"])
    assert start.meta["components"] == 2  # the refiner's prompt is a component gepa evolves
    # Refinements are not reflections: the refiner's LM is not the recorded reflection LM.
    assert len(trace.of(Reflection)) == run.reflection_calls
    # Unrecorded, the same run.
    cfg = config(sampling=(1, 1), max_metric_calls=60)
    cfg.refiner = RefinerConfig(refiner_lm=RefinerLM(), max_refinements=2)
    bare = optimize_anything(**anything(config=cfg))
    assert bare.candidates == result.candidates
    assert bare.total_metric_calls == result.total_metric_calls


def test_the_refiner_defaults_to_the_reflection_lm_and_is_still_no_reflection(tmp_path):
    lm = CallableLM()
    cfg = config(lm=lm, sampling=(1, 1), max_metric_calls=40)
    cfg.refiner = RefinerConfig()
    rec, result, trace = record_anything(tmp_path / "run", config=cfg)
    checked(rec, result, trace)
    reflections = trace.of(Reflection)
    # gepa calls the same LM for its refinements: those calls are not reflection events.
    assert len(reflections) == rec.result.reflection_calls < lm.calls


@pytest.mark.parametrize(
    ("stop", "said"),
    [
        (lambda run_dir: {"stop_callbacks": [TimeoutStopCondition(0)]}, "TimeoutStopCondition"),
        (lambda run_dir: {"stop_callbacks": [NoImprovementStopper(1)]}, "NoImprovementStopper"),
        (lambda run_dir: {"stop_callbacks": [ScoreThresholdStopper(0.3)]}, "threshold 0.3"),
        (lambda run_dir: {"stop_callbacks": [Reached(2)]}, "ended by Reached"),
        (lambda run_dir: {"callbacks": [StopFileAt(run_dir, 2)]}, "stop file gepa.stop"),
        (
            lambda run_dir: {"max_candidate_proposals": 3},
            "max_candidate_proposals: 3 iterations of 3",
        ),
    ],
)
def test_the_trace_says_which_stop_condition_ended_the_run(tmp_path, stop, said):
    run_dir = str(tmp_path / "gepa-dir")
    extra = stop(run_dir)
    cfg = config(sampling=(1, 1), max_metric_calls=400)
    cfg.engine.run_dir = run_dir
    cfg.engine.max_candidate_proposals = extra.get("max_candidate_proposals")
    cfg.stop_callbacks = extra.get("stop_callbacks")
    cfg.callbacks = extra.get("callbacks")
    rec, result, trace = record_anything(tmp_path / "run", config=cfg)
    checked(rec, result, trace)
    assert said in trace.run_end.message, trace.run_end.message
    assert result.total_metric_calls < 400
    if "max_candidate_proposals" in extra:
        assert trace.run_start.meta["max_candidate_proposals"] == 3
        assert rec.result.iterations == 3
    if "stop_callbacks" in extra:
        (name,) = trace.run_start.meta["stop_callbacks"]  # the user's, named
        assert name.split()[0] == type(extra["stop_callbacks"][0]).__name__


def test_a_budget_without_max_metric_calls_is_what_the_run_made(tmp_path):
    cfg = config(sampling=(2, 1))
    cfg.engine.max_metric_calls = None
    cfg.engine.max_candidate_proposals = 2
    rec, result, trace = record_anything(tmp_path / "run", config=cfg)
    checked(rec, result, trace)
    assert trace.run_start.budget == 0 and rec.result.iterations == 2


def test_a_merge_is_recorded_as_gepa_optimize_merges_are(tmp_path):
    cfg = config(sampling=(1, 1), max_metric_calls=150)
    cfg.merge = MergeConfig()
    rec, result, trace = record_anything(
        tmp_path / "run", seed_candidate={"words": "w0", "more": "w1"}, config=cfg
    )
    checked(rec, result, trace)
    start = trace.run_start
    assert (start.meta["use_merge"], start.meta["components"]) == (True, 2)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"evaluator": None}, "evaluator is needed"),
        ({"evaluator": "score"}, "evaluator must be a function"),
        ({"seed_candidate": None}, "seed_candidate is needed: gepa's seedless mode"),
        ({"seed_candidate": {}}, "seed_candidate must be a text, or a dict"),
        ({"dataset": []}, "dataset is empty"),
        ({"valset": "abc"}, "valset must be a list of examples"),
        ({"config": {"engine": {}}}, "config must be a GEPAConfig"),
        ({"dataset_": TRAIN}, "dataset_ is not an argument of optimize_anything (did you mean"),
    ],
)
def test_bad_optimize_anything_arguments_are_one_line_each(tmp_path, change, said):
    with pytest.raises(PxnError) as caught, recording(tmp_path / "run") as rec:
        rec.wrap(**{**anything(), **change})
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "trace.jsonl").exists()
    assert gepa_anything.OptimizeAnythingAdapter is OriginalAdapter


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ({"max_metric_calls": None}, "config.engine.max_metric_calls is needed"),
        ({"max_metric_calls": 6}, "6 leaves nothing after the seed's validation (6 metric"),
        ({"cache_evaluation": True}, "config.engine.cache_evaluation answers"),
        ({"max_candidate_proposals": 0}, "max_candidate_proposals must be a whole number"),
        ({"workers": 0}, "config.engine.max_workers must be a whole number >= 1"),
    ],
)
def test_a_config_gepa_could_only_fail_on_later_is_refused(tmp_path, engine, said):
    cfg = config(**{"max_metric_calls": 80, **engine})
    with pytest.raises(PxnError) as caught, recording(tmp_path / "run") as rec:
        rec.wrap(**anything(config=cfg))
    assert said in str(caught.value)


def test_optimize_anything_resumes_into_the_same_trace(tmp_path):
    class InterruptAt:
        def on_iteration_end(self, event):
            if event["iteration"] == 2:
                raise KeyboardInterrupt

    out = tmp_path / "run"
    cfg = config(sampling=(1, 1))
    cfg.callbacks = [InterruptAt()]
    with pytest.raises(KeyboardInterrupt):
        record_anything(out, config=cfg)
    assert read_trace(out / "trace.jsonl").run_end.status == "interrupted"
    assert gepa_anything.OptimizeAnythingAdapter is OriginalAdapter
    rec, result, trace = record_anything(
        out, rec_kw={"resume": True}, config=config(sampling=(1, 1))
    )
    assert rec.result.status == "completed" and rec.result.mismatches == ()
    assert summarize(trace).metric_calls == result.total_metric_calls


def test_an_unrecorded_optimize_anything_beside_a_recording_is_left_alone(tmp_path):
    """Only the recorded run's adapter is reached: another run made while one is being set up
    gets gepa's own."""
    with recording(tmp_path / "run") as rec:
        kwargs = rec.wrap(**anything(config=config(sampling=(1, 1))))
        other = optimize_anything(**anything(config=config(sampling=(1, 1), max_metric_calls=20)))
        result = optimize_anything(**kwargs)
    checked(rec, result, read_trace(tmp_path / "run" / "trace.jsonl"))
    assert other.total_metric_calls < result.total_metric_calls


# ---- gepa.optimize with task_lm: gepa's default adapter ----


def default_run(**kw):
    return {
        "seed_candidate": {"system_prompt": "w0"},
        "trainset": DEFAULT_TRAIN,
        "valset": DEFAULT_VAL,
        "task_lm": TaskModel(),
        "reflection_lm": CallableLM(),
        "max_metric_calls": 60,
        "sampling_strategy": PxNSampling(2, 2),
        **kw,
    }


def test_gepa_optimize_with_task_lm_builds_gepa_s_default_adapter_and_times_each_reply(tmp_path):
    model = TaskModel()
    with recording(tmp_path / "run") as rec:
        kwargs = rec.wrap(**default_run(task_lm=model))
        assert "task_lm" not in kwargs and "evaluator" not in kwargs
        assert not hasattr(kwargs["adapter"], "batch_evaluate")  # as gepa's DefaultAdapter
        result = gepa.optimize(**kwargs)
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    run = rec.result
    assert run.status == "completed" and run.mismatches == ()
    rollouts = trace.of(Rollout)
    # Each reply of the task model is one timed rollout, scored by gepa's evaluator.
    assert len(rollouts) == result.total_metric_calls == model.calls
    assert all(r.timed for r in rollouts) and {r.score for r in rollouts} <= {0.0, 1.0}
    start = trace.run_start
    assert start.workers == 10  # DefaultAdapter's max_litellm_workers
    assert start.meta["adapter"] == "TimedDefaultAdapter"
    assert (start.meta["task_lm"], start.meta["max_litellm_workers"]) == ("TaskModel", 10)
    assert start.meta["evaluates"] == "pair_by_pair" and start.meta["not_modelled"]
    assert trace.run_end.message.startswith("ended by max_metric_calls")
    # The same run unrecorded, gepa building its adapter itself.
    bare = gepa.optimize(**default_run())
    assert bare.candidates == result.candidates
    assert bare.val_aggregate_scores == result.val_aggregate_scores
    assert bare.total_metric_calls == result.total_metric_calls


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"task_lm": None}, "adapter is needed: pass your GEPAAdapter, or task_lm"),
        ({"task_lm": 3}, "task_lm must be a model name"),
        ({"adapter": object()}, "task_lm is for gepa's default adapter"),
    ],
)
def test_task_lm_misuse_is_one_line(tmp_path, change, said):
    with pytest.raises(PxnError) as caught, recording(tmp_path / "run") as rec:
        rec.wrap(**{**default_run(), **change})
    assert said in str(caught.value)


# ---- pxn run --api optimize_anything ----


def test_pxn_run_drives_its_task_through_optimize_anything(tmp_path):
    """`pxn run --api optimize_anything`'s engine on the synthetic task, both models sleeping
    fixed latencies: the task's program and metric are the evaluator on W of gepa's threads,
    each call a timed rollout with its tokens' note, the totals gepa's."""
    scenario = make_scenario(
        budget=60, valset_size=6, trainset_size=12, workers=3,
        rollout=fixed(0.002), reflection=fixed(0.002),
    )  # fmt: skip
    out = tmp_path / "run"
    config = RunConfig(
        out=str(out), shape="2x2", budget=60, workers=3, progress=False, api="optimize_anything"
    )
    plan = Plan(
        2, 2, synthetic_task(scenario), reflection_concurrency=4, max_failures=20, budget=60
    )
    rng = np.random.default_rng(0)
    result = run_engine(
        config, plan, SleepingModel(scenario, rng), SyntheticReflectionModel(scenario, rng)
    )
    assert result.status == "completed" and result.warnings == [], result
    trace = read_trace(out / "trace.jsonl")
    start = trace.run_start
    assert (start.meta["api"], start.meta["mode"]) == ("optimize_anything", "generalization")
    assert (start.shape, start.workers, start.reflection_concurrency) == ("2x2", 3, 4)
    rollouts = trace.of(Rollout)
    assert result.result["metric_calls"] == len(rollouts) and all(r.timed for r in rollouts)
    assert all(r.attempts == 1 for r in rollouts)  # told by the evaluator through its note
    assert result.result["trace_check"] == "ok"
    assert trace.run_end.message.startswith("ended by max_metric_calls")


def test_pxn_run_names_an_unknown_api_in_one_line(tmp_path):
    ran = run_pxn("run", "--out", tmp_path / "run", "--api", "optimize")
    assert_user_error(ran, "--api", "gepa.optimize or optimize_anything, got 'optimize'")
    ran = run_pxn(
        "run", "--out", tmp_path / "run", "--api", "optimize_anything", "--backend", "ray"
    )
    assert ran.returncode == 2 and "--api" in ran.stderr
    assert not (tmp_path / "run").exists()
