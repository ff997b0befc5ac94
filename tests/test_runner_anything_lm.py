"""gepa as its docs lead with, recorded with the one line on the real local LM pool:
gepa.optimize building its default adapter from task_lm, optimize_anything with an evaluator
that calls the model, and `pxn run --api optimize_anything`."""

from __future__ import annotations

import json

import gepa
import litellm
import pytest
from gepa.optimize_anything import EngineConfig, GEPAConfig, ReflectionConfig, optimize_anything
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.runner.config import RunConfig
from pxn.runner.record import recording
from pxn.runner.run import run_gepa
from pxn.runner.topic_task import make_topic_task
from pxn.trace import Reflection, Rollout
from pxn.trace_reading import read_trace

pytestmark = pytest.mark.lm

TASK = make_topic_task()
QUESTION = "Which topic is this sentence about: music, weather, food or sports?"


def reflection(server) -> dict:
    return {
        "reflection_lm": "openai/smollm2",
        "reflection_lm_kwargs": {"api_base": server.api_base, "api_key": "local", "max_tokens": 40},
    }


def checked(rec, total_metric_calls: int, trace) -> None:
    run = rec.result
    assert run.status == "completed" and run.mismatches == (), run
    assert trace.skipped == [] and len(trace.of(Rollout)) == total_metric_calls
    rollouts = trace.of(Rollout)
    assert all(r.timed and r.error is None for r in rollouts)
    assert len(trace.of(Reflection)) == run.reflection_calls > 0


def test_gepa_optimize_with_task_lm_on_the_local_lm(tmp_path, lm_pool, monkeypatch):
    """gepa's quick start, as written: a model string for the task and for the reflection;
    litellm finds the task model's server from the environment."""
    task_server, reflection_server = lm_pool.servers[:2]
    monkeypatch.setenv("OPENAI_API_BASE", task_server.api_base)
    monkeypatch.setenv("OPENAI_API_KEY", "local")

    def data(examples):
        return [
            {"input": f"{QUESTION}\nSentence: {e.sentence}", "additional_context": {},
             "answer": e.topic}
            for e in examples
        ]  # fmt: skip

    out = tmp_path / "run"
    with recording(out) as rec:
        result = gepa.optimize(
            **rec.wrap(
                seed_candidate={"system_prompt": "Answer with one lowercase word."},
                trainset=data(TASK.train[:6]),
                valset=data(TASK.val[:4]),
                task_lm="openai/smollm2",
                max_metric_calls=20,
                **reflection(reflection_server),
            )
        )
    trace = read_trace(out / "trace.jsonl")
    checked(rec, result.total_metric_calls, trace)
    assert trace.run_start.workers == 10 and trace.run_start.meta["task_lm"] == "openai/smollm2"
    assert all(r.tokens_out for r in trace.of(Rollout))  # each reply metered


def test_optimize_anything_with_an_evaluator_calling_the_local_lm(tmp_path, lm_pool):
    task_server, reflection_server = lm_pool.servers[:2]

    def evaluate(candidate, example):
        reply = litellm.completion(
            model="openai/smollm2",
            api_base=task_server.api_base,
            api_key="local",
            max_tokens=8,
            messages=[
                {"role": "user", "content": f"Hint: {candidate['hint']}\n{example.sentence}\n"
                 f"{QUESTION} Answer with one word."}
            ],
        )  # fmt: skip
        text = reply.choices[0].message.content or ""
        score = 1.0 if example.topic in text.lower() else 0.0
        return score, {"Sentence": example.sentence, "Answer": text, "Topic": example.topic}

    out = tmp_path / "run"
    with recording(out) as rec:
        result = optimize_anything(
            **rec.wrap(
                seed_candidate={"hint": "Think about what the sentence is mostly about."},
                evaluator=evaluate,
                dataset=list(TASK.train[:6]),
                valset=list(TASK.val[:4]),
                config=GEPAConfig(
                    engine=EngineConfig(
                        max_metric_calls=24, max_workers=2, sampling_strategy=PxNSampling(1, 2)
                    ),
                    reflection=ReflectionConfig(**reflection(reflection_server)),
                ),
            )
        )
    trace = read_trace(out / "trace.jsonl")
    checked(rec, result.total_metric_calls, trace)
    start = trace.run_start
    assert (start.workers, start.shape, start.meta["mode"]) == (2, "1x2", "generalization")
    assert rec.result.workers_seen <= 2


def test_pxn_run_api_optimize_anything_on_the_pool(tmp_path, lm_pool):
    out = tmp_path / "run"
    run = run_gepa(
        RunConfig(
            out=str(out), shape="2x1", budget=30, workers=2, progress=False,
            api="optimize_anything",
        ),
        pool=lm_pool,
    )  # fmt: skip
    assert run.status == "completed", run
    result = json.loads((out / "result.json").read_text())
    assert result["trace_check"] == "ok"
    trace = read_trace(out / "trace.jsonl")
    assert trace.run_start.meta["api"] == "optimize_anything"
    rollouts = trace.of(Rollout)
    assert len(rollouts) == result["metric_calls"]
    assert all(r.timed for r in rollouts) and any(r.tokens_in for r in rollouts)
