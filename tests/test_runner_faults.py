"""Faults, secrets and bad input, against the tests' own misbehaving OpenAI-style server.

Real gepa and real litellm run end to end; only the model behind the HTTP
endpoint is the fault server (no llama.cpp needed, so these run in the quick suite).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_user_error, run_pxn
from fault_server import FaultServer

from pxn.runner.recording.totals import trace_totals
from pxn.runner.run import RunConfig, run_gepa
from pxn.trace import Attempt, Reflection, Rollout, RunEnd
from pxn.trace_reading import read_trace

PLANTED = "sk-test-PLANTED0123456789abcdef"


def fault_config(out: Path, api_base: str, **kw) -> RunConfig:
    base = dict(
        out=str(out),
        task="plugin_task:make_failing_task",
        task_lm="openai/fault",
        reflection_lm="openai/fault",
        api_base=api_base,
        shape="2x2",
        budget=60,
        workers=3,
        progress=False,
        timeout=1.0,
    )
    base.update(kw)
    return RunConfig(**base)


def all_text(out: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace")
        for p in out.rglob("*")
        if p.is_file() and p.suffix in {".jsonl", ".json", ".txt", ".log"}
    )


@pytest.mark.slow
def test_faults_are_retried_recorded_and_totals_match(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    out = tmp_path / "run"
    with FaultServer(
        error_rate=0.1, rate_limit_rate=0.1, slow_rate=0.05, drop_rate=0.05, slow_seconds=1.5
    ) as server:
        result = run_gepa(fault_config(out, server.api_base))
    assert result.status == "completed", result.message
    assert result.result["trace_check"] == "ok"
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == []
    assert isinstance(trace.events[-1], RunEnd) and trace.events[-1].status == "completed"

    # Every fault the server injected shows up as one failed attempt in the trace.
    attempts = trace.of(Attempt)
    assert len(attempts) == sum(server.faults.values())
    errors = " ".join(a.error for a in attempts)
    # 500, 429, a too-slow answer, a dropped connection (litellm: "Connection error").
    for kind in ("boom", "RateLimitError", "Timeout", "Connection error"):
        assert kind in errors, f"no {kind} among the recorded attempts"

    # The always-failing example exhausted its retries, scored 0, and the run went on.
    bad = [r for r in trace.of(Rollout) if r.example == "val/8"]
    assert bad and all(r.score == 0.0 and r.error and r.attempts == 4 for r in bad)
    # A retried-then-successful rollout carries its attempt count.
    assert any(r.attempts > 1 and r.error is None for r in trace.of(Rollout))

    totals = trace_totals(trace)
    assert totals.metric_calls == result.result["metric_calls"]
    assert totals.max_concurrent <= 3

    # The key really went over the wire (so the check below means something) ...
    assert any(PLANTED in auth for auth in server.seen_auth)
    # ... and appears nowhere we write, nor on the console.
    captured = capsys.readouterr()
    assert PLANTED not in all_text(out)
    assert PLANTED not in captured.out + captured.err
    assert "[REDACTED]" in all_text(out)  # the echoed header was caught, not just absent


def test_bad_input_writes_nothing(tmp_path):
    from pxn.errors import PxnError

    out = tmp_path / "never"
    for kw, needle in [
        ({"shape": "0x2"}, "^shape needs"),
        ({"workers": 0}, "^workers must be at least 1"),
        ({"budget": 3}, "below one seed validation"),
        ({"task": "no-such-task"}, "unknown task"),
        ({"selection": "worst"}, "^selection is all, best"),
    ]:
        with pytest.raises(PxnError, match=needle):
            run_gepa(fault_config(out, "http://127.0.0.1:9/v1", **kw))
    # An unreachable model is found by the probe, before anything is written.
    with pytest.raises(PxnError, match="cannot be reached"):
        run_gepa(fault_config(out, "http://127.0.0.1:9/v1", max_attempts=1))
    assert not out.exists()


@pytest.mark.slow
def test_result_json_is_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-key")
    with FaultServer() as server:
        result = run_gepa(fault_config(tmp_path / "ok", server.api_base, budget=30))
    data = json.loads((tmp_path / "ok" / "result.json").read_text())
    for key in (
        "best_candidate",
        "best_val_score",
        "test_score",
        "iterations",
        "accepted",
        "metric_calls",
        "full_val_evals",
        "wall_clock_s",
        "tokens_in",
        "tokens_out",
        "versions",
    ):
        assert key in data
    assert data["versions"]["gepa"] == "0.1.4"
    assert result.status == "completed"


@pytest.mark.slow
def test_failing_reflections_stop_the_run_with_a_clear_message(tmp_path, monkeypatch):
    # gepa 0.1.4 logs reflection errors and goes on: without the runner's count the
    # run would spend its whole budget re-evaluating the seed.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-key")
    out = tmp_path / "run"
    with FaultServer(fail_reflections=True) as server:
        result = run_gepa(
            fault_config(
                out, server.api_base, shape="1x1", budget=400, max_attempts=2,
                task="plugin_task:make_task",
            )
        )  # fmt: skip
    assert result.status == "failed"
    assert "reflections in a row produced no proposal" in result.message
    trace = read_trace(out / "trace.jsonl")
    end = trace.events[-1]
    assert isinstance(end, RunEnd) and end.status == "failed"
    assert end.metric_calls < 400 // 2
    reflections = trace.of(Reflection)
    # One traced call per reflection (gepa's retry of a failed one makes no second call).
    assert len(reflections) == 5 and all(r.error for r in reflections)
    assert len({r.proposal for r in reflections}) == 5


@pytest.mark.parametrize(
    "flags",
    [
        ["--shape", "0x2"],
        ["--workers", "0"],
        ["--budget", "3"],
        ["--minibatch", "0"],
        ["--minibatch", "999"],
        ["--task", "no-such-task"],
        # Unreachable: nothing listens on port 9.
        [
            "--task-model",
            "openai/x",
            "--reflection-model",
            "openai/x",
            "--api-base",
            "http://127.0.0.1:9/v1",
        ],
    ],
)
def test_cli_bad_flags_one_line_exit_2(tmp_path, flags, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    out = tmp_path / "never"
    result = run_pxn("run", "--out", out, "--no-progress", *flags)
    assert_user_error(result)
    assert PLANTED not in result.stderr + result.stdout
    assert not out.exists()


@pytest.mark.slow
def test_validation_and_budget_events_match_gepa(tmp_path, monkeypatch):
    from pxn.trace import Budget, Validation

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy-key")
    out = tmp_path / "run"
    with FaultServer() as server:
        result = run_gepa(fault_config(out, server.api_base, task="plugin_task:make_task"))
    trace = read_trace(out / "trace.jsonl")
    validations = trace.of(Validation)
    # The seed's and each accepted child's full validation, as gepa counted them.
    assert len(validations) == result.result["full_val_evals"]
    assert validations[0].iteration == 0 and validations[0].candidate == "0"
    assert validations[0].score == result.result["seed_val_score"]
    # gepa's running count ends at its total, and the trace's rollouts add up to it.
    budgets = trace.of(Budget)
    assert budgets[-1].metric_calls == result.result["metric_calls"]
    assert len(trace.of(Rollout)) == budgets[-1].metric_calls
