"""dspy.GEPA recorded with one line (pxn.runner.dspy_recording): the real DSPy 3.4.1 and gepa
0.1.4, compiling a tiny project-made program against the local SmolLM2 pool.

The recorded trace is checked against gepa's own totals and against the run's shape (W =
DSPy's num_threads, one reflection at a time, reflections never during rollouts), and
`pxn calibrate` turns it into a scenario. SmolLM2-135M rarely writes the field format DSPy
asks for, so most rollouts score 0 and most reflections fail: the plumbing and the
latencies are real, the optimization is not the point. No timing is asserted.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import dspy
import gepa
import pytest
from conftest import run_pxn
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.errors import PxnError
from pxn.runner.checks import max_concurrency, trace_totals
from pxn.runner.dspy_recording import recorded
from pxn.runner.lm_pool import LOCAL_KEY
from pxn.runner.topic_data import ROWS, SPLITS
from pxn.scenario import Scenario
from pxn.trace import Reflection, Rollout, RunEnd, Stage, read_trace


class Topic(dspy.Signature):
    """Label the sentence's topic."""

    sentence: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="one of sports, food, weather, music")


def examples(split: str, count: int) -> list[dspy.Example]:
    lo, _ = SPLITS[split]
    return [
        dspy.Example(sentence=sentence, topic=topic).with_inputs("sentence")
        for sentence, topic, _ in ROWS[lo : lo + count]
    ]


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    said = str(pred.get("topic") or "").strip().lower()
    right = gold.topic in said
    feedback = "Correct." if right else f"The topic is {gold.topic}, not {said!r}."
    return dspy.Prediction(score=float(right), feedback=feedback)


def local_lm(api_base: str, max_tokens: int) -> dspy.LM:
    # llama.cpp's server reads `max_tokens` only, and DSPy sends OpenAI's
    # `max_completion_tokens`: without the extra body the replies run unbounded.
    return dspy.LM(
        "openai/smollm2",
        api_base=api_base,
        api_key=LOCAL_KEY,
        cache=False,
        temperature=1.0,
        max_tokens=max_tokens,
        extra_body={"max_tokens": max_tokens},
    )


def optimizer(reflection_lm: dspy.LM, **kw) -> dspy.GEPA:
    base = dict(
        metric=metric,
        max_metric_calls=30,
        reflection_lm=reflection_lm,
        num_threads=2,
        use_merge=False,
        track_stats=True,
    )
    return dspy.GEPA(**{**base, **kw})


def overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


UNREACHABLE = "http://127.0.0.1:9/v1"  # no LM call is made by the tests that use it


def test_merge_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(PxnError) as caught:
        recorded(optimizer(local_lm(UNREACHABLE, 8), use_merge=True), out)
    assert caught.value.subject == "use_merge" and "use_merge=False" in str(caught.value)
    assert not out.exists()


def test_only_a_dspy_gepa_is_recorded(tmp_path):
    with pytest.raises(PxnError) as caught:
        recorded(dspy.BootstrapFewShot(metric=metric), tmp_path / "run")
    assert caught.value.subject == "optimizer" and "BootstrapFewShot" in str(caught.value)


def test_a_directory_holding_a_trace_is_refused_and_gepa_left_as_it_was(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "trace.jsonl").write_text("earlier run\n")
    original = gepa.optimize
    opt = recorded(optimizer(local_lm(UNREACHABLE, 8)), out)
    with dspy.context(lm=local_lm(UNREACHABLE, 8)), pytest.raises(PxnError) as caught:
        opt.compile(dspy.Predict(Topic), trainset=examples("train", 3))
    assert "already holds a trace" in str(caught.value)
    assert gepa.optimize is original
    assert (out / "trace.jsonl").read_text() == "earlier run\n"
    # Everything but compile is the optimizer's own.
    assert opt.max_metric_calls == 30 and opt.num_threads == 2


@pytest.mark.lm
@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "gepa_kwargs", "budget"),
    # 2x2 at 16 metric calls: the seed's validation and one batched step.
    [("1x1", {}, 30), ("2x2", {"sampling_strategy": PxNSampling(2, 2)}, 16)],
)
def test_a_compile_is_recorded_as_gepa_ran_it_and_calibrates(
    tmp_path: Path, lm_pool, shape, gepa_kwargs, budget
):
    out = tmp_path / "run"
    task_server, reflection_server = (s.api_base for s in lm_pool.servers[:2])
    original = gepa.optimize
    opt = recorded(
        optimizer(
            local_lm(reflection_server, 150), max_metric_calls=budget, gepa_kwargs=gepa_kwargs
        ),
        out,
        # SmolLM2 rarely writes the JSON DSPy's proposer asks for: let the run spend its
        # budget however many reflections fail in a row.
        max_reflection_failures=100,
    )
    with dspy.context(lm=local_lm(task_server, 16)):
        program = opt.compile(
            dspy.Predict(Topic), trainset=examples("train", 6), valset=examples("val", 4)
        )
    assert gepa.optimize is original
    gepa_result = program.detailed_results
    run = opt.result
    assert run.status == "completed" and run.mismatches == (), run
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == [] and isinstance(trace.events[-1], RunEnd)

    # The trace's totals are gepa's.
    rollouts = trace.of(Rollout)
    totals = trace_totals(trace)
    assert len(rollouts) == gepa_result.total_metric_calls == run.metric_calls
    assert totals.full_val_evals == gepa_result.num_full_val_evals
    assert totals.accepted == run.accepted == len(gepa_result.candidates) - 1
    assert run.iterations >= 1

    # W is DSPy's num_threads: declared, and never exceeded.
    start = trace.run_start
    assert start.shape == shape and start.budget == budget
    assert start.workers == 2 and start.valset_size == 4 and start.trainset_size == 6
    assert start.meta["dspy"] == "3.4.1" and start.meta["dspy_cache"] is False
    assert max_concurrency(rollouts) <= 2 and {r.worker for r in rollouts} <= {0, 1}
    assert {r.example for r in rollouts if r.phase == "seed_val"} == {f"val/{i}" for i in range(4)}
    # DSPy's usage reached the rollouts it ran in (a program that raised has none).
    assert any(r.tokens_in and r.tokens_out for r in rollouts)

    # Each rollout lies inside a stage of its own phase and iteration.
    stages = trace.of(Stage)
    for r in rollouts:
        assert any(
            (s.name, s.iteration) == (r.phase, r.iteration) and s.start <= r.start <= r.end <= s.end
            for s in stages
        ), r

    # gepa asks DSPy's proposer for one proposal at a time, between the minibatches.
    reflections = trace.of(Reflection)
    assert start.reflection_concurrency == 1
    assert reflections and len(reflections) >= run.proposals
    assert not any(overlap(a, b) for a, b in itertools.combinations(reflections, 2))
    assert not any(overlap(f, r) for f in reflections for r in rollouts)
    assert any(f.tokens_in for f in reflections)

    # The round trip: the trace calibrates into a scenario of the same pool.
    ran = run_pxn("calibrate", out, "-o", tmp_path / "calibrated.toml", "--jobs", "1")
    assert ran.returncode == 0, ran.stderr
    scenario = Scenario.load(tmp_path / "calibrated.toml")
    assert scenario.workers == 2 and scenario.valset_size == 4 and scenario.trainset_size == 6
    assert scenario.reflection_concurrency == 1
