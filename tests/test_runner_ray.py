"""`pxn run --backend ray`: rollouts as Ray tasks on a real local Ray, W at most in flight.

The real-LM test runs the same greedy run (temperature 0 everywhere, so
llama.cpp answers the same prompt the same way) on W threads and on a private
local Ray, and compares what must be equal. The fault test runs on a Ray head
started with `ray start --head` on 127.0.0.1: retries, failed rollouts and
secrets behave in Ray workers exactly as in threads.

Every Ray run is a `pxn run` child process: Ray keeps its authentication mode
per process, so after this process has talked to a token-authenticated head
(test_ray_backend.py does) a private Ray started in it would fail. Ray
workers import the tests' task modules by name, so the tests directory is on
the children's PYTHONPATH (a private Ray's workers inherit the driver's
environment; a head's workers inherit the head's).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import PXN
from fault_server import FaultServer
from gepa.core.state import GEPAState
from ray_heads import started_head, token_auth
from test_core_trace import header
from test_runner_faults import PLANTED, all_text
from test_runner_resume import assert_whole_run_totals

from pxn.errors import PxnError
from pxn.runner.config import RunConfig, plan
from pxn.runner.recording.totals import max_concurrency, trace_totals
from pxn.runner.tasks import Task
from pxn.runner.topic_task import make_topic_task
from pxn.trace import Attempt, Decision, Rollout, Stage, TraceWriter
from pxn.trace_reading import read_trace

TESTS = Path(__file__).parent


def make_greedy_task() -> Task:
    """The topics task at temperature 0, task and reflection LM alike: a run is a function
    of its inputs, so two backends must make the same run."""
    task = make_topic_task()
    return replace(
        task,
        name="topics-greedy",
        test=task.test[:4],  # scored after the loop: a few show both pools agree
        lm_kwargs={"temperature": 0.0, "max_tokens": 8},
        reflection_lm_kwargs={"temperature": 0.0, "max_tokens": 40},
    )


# ---- quick: the schema and the flags ----


def test_rollouts_without_node_and_task_id_still_read(tmp_path: Path) -> None:
    # A trace written before the two fields existed has neither key on its lines.
    path = tmp_path / "old.jsonl"
    new = Rollout(
        start=0.0, end=1.0, iteration=0, phase="seed_val", worker=0, candidate="0",
        example="val/0", node="ab" * 28, task_id="cd" * 24,
    )  # fmt: skip
    with TraceWriter(path) as writer:
        writer.write(header())
        writer.write(new)
    lines = path.read_text().splitlines()
    old = json.loads(lines[1])
    del old["node"], old["task_id"]
    path.write_text("\n".join([lines[0], json.dumps(old), lines[1]]) + "\n")
    trace = read_trace(path)
    assert trace.skipped == []
    first, second = trace.of(Rollout)
    assert (first.node, first.task_id) == (None, None)
    assert second == new
    assert first == replace(new, node=None, task_id=None)


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"eval_backend": "dask"}, "^eval backend is local or ray, got 'dask'"),
        ({"ray_address": "127.0.0.1:6379"}, "^ray address is for the ray backend"),
        ({"eval_backend": "ray", "ray_address": "127.0.0.1"}, "^ray address is HOST:PORT"),
        ({"eval_backend": "ray", "ray_address": "h:70000"}, "^ray address is HOST:PORT"),
    ],
)
def test_bad_eval_backend_flags(tmp_path: Path, kw: dict, fragment: str) -> None:
    with pytest.raises(PxnError, match=fragment):
        plan(RunConfig(out=str(tmp_path / "x"), **kw))


def pxn_run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PXN), "run", "--no-progress", *map(str, args)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def assert_one_line_exit_2(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pxn: error: "), result.stderr
    assert fragment in lines[0]


def test_cli_bad_eval_backend_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "never"
    assert_one_line_exit_2(pxn_run("--out", out, "--backend", "spark"), "--backend is local or ray")
    assert not out.exists()


def test_cli_unreachable_ray_head_is_one_line_exit_2(tmp_path: Path) -> None:
    # Checked with the flags, before litellm's import: nothing listens on a freed port.
    from ray_heads import free_port

    out, port = tmp_path / "never", free_port()
    result = pxn_run("--out", out, "--backend", "ray", "--address", f"127.0.0.1:{port}")
    assert_one_line_exit_2(result, f"cannot reach a Ray head at 127.0.0.1:{port}")
    assert not out.exists()


# ---- real runs ----


def check_ray_trace(out: Path, workers: int) -> tuple[dict, list[Rollout]]:
    """A Ray run's trace: complete, gepa's counts, W slots, at most W at once, Ray's ids."""
    result = json.loads((out / "result.json").read_text())
    trace = read_trace(out / "trace.jsonl")
    meta = trace.run_start.meta
    assert meta["eval_backend"] == "ray"
    assert len(meta["ray_nodes"]) == workers
    # The totals of result.json, run_end and the trace are gepa's own (its saved state), as
    # for a run on threads; and the trace holds one rollout per metric call gepa counted.
    assert_whole_run_totals(out)
    rollouts = trace.of(Rollout)
    assert len(rollouts) == GEPAState.load(str(out / "gepa")).total_num_evals
    assert len(rollouts) == result["metric_calls"] == trace_totals(trace).metric_calls
    # Every rollout and failed try on one of the W slots the workers report with.
    assert {r.worker for r in rollouts} <= set(range(workers))
    assert {a.worker for a in trace.of(Attempt) if a.call == "rollout"} <= set(range(workers))
    assert max_concurrency(rollouts) <= workers
    # One slot runs one rollout at a time, on its actor's node; every task is its own.
    for slot in range(workers):
        mine = sorted((r for r in rollouts if r.worker == slot), key=lambda r: r.start)
        assert max_concurrency(mine) <= 1
        assert {r.node for r in mine} <= {meta["ray_nodes"][slot]}
    assert len({r.task_id for r in rollouts}) == len(rollouts)
    # Timed inside the task, yet within its stage on the driver's clock.
    stages = trace.of(Stage)
    for r in rollouts:
        assert any(s.name == r.phase and s.iteration == r.iteration and s.start <= r.start
                   and r.start <= r.end <= s.end for s in stages)  # fmt: skip
    return result, rollouts


def run_shape(rollouts: list[Rollout]) -> Counter:
    """What gepa did, independent of timing: each rollout's (iteration, phase, candidate,
    example, score), as a multiset."""
    return Counter((r.iteration, r.phase, r.candidate, r.example, r.score) for r in rollouts)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a `pxn run` child: the tests' modules importable, plus `extra`."""
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


@pytest.mark.slow
@pytest.mark.lm
def test_ray_run_equals_the_local_run(
    tmp_path: Path, lm_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Ray run (a child, see the docstring) finds the session's LM pool by its record,
    # as it would a `pxn lm serve` pool.
    from pxn.runner.lm_records import PoolRecord
    from pxn.runner.run import run_gepa

    state = tmp_path / "state"
    monkeypatch.setenv("PXN_STATE_DIR", str(state))
    PoolRecord.for_this_process(
        started_by="the test session", shared=True, model=lm_pool.model, servers=lm_pool.servers
    ).save()
    common = dict(task="test_runner_ray:make_greedy_task", shape="1x1", budget=20, workers=2)
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in common.items()]
    # Both runs at once, to save time: greedy answers do not depend on the load.
    child = subprocess.Popen(
        [str(PXN), "run", "--no-progress", "--out", str(tmp_path / "ray"), *flags,
         "--backend", "ray"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(PXN_STATE_DIR=str(state)),
    )  # fmt: skip
    try:
        config = RunConfig(out=str(tmp_path / "local"), progress=False, **common)
        local = run_gepa(config, pool=lm_pool)
        _, stderr = child.communicate(timeout=300)
    finally:
        if child.poll() is None:  # SIGTERM: the child stops its private Ray on the way out
            child.terminate()
            child.wait(timeout=120)
    assert local.status == "completed", local.message
    assert child.returncode == 0, stderr
    result, rollouts = check_ray_trace(tmp_path / "ray", workers=2)
    ray_trace = read_trace(tmp_path / "ray" / "trace.jsonl")
    assert ray_trace.run_start.meta["ray_address"] == "private local Ray"
    assert ray_trace.run_start.meta["lm_servers"] == len(lm_pool.servers)  # the same pool
    local_trace = read_trace(tmp_path / "local" / "trace.jsonl")
    assert local_trace.run_start.meta["eval_backend"] == "local"
    assert all(r.node is None and r.task_id is None for r in local_trace.of(Rollout))

    # The same run: gepa's counts, every rollout with its score, every decision.
    for key in ("metric_calls", "iterations", "proposals", "accepted", "full_val_evals",
                "best_candidate", "best_val_score", "seed_val_score", "test_score"):  # fmt: skip
        assert result[key] == local.result[key], key
    assert run_shape(rollouts) == run_shape(local_trace.of(Rollout))

    def decisions(trace):
        return [(d.iteration, d.proposal, d.accepted, d.score_before, d.score_after)
                for d in trace.of(Decision)]  # fmt: skip

    assert decisions(ray_trace) == decisions(local_trace)


# ---- faults on a `ray start --head` ----


@pytest.fixture(scope="module")
def fault_head() -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head on 127.0.0.1 whose workers have the planted key and the tests' modules,
    as a cluster's nodes must (the key is never sent with a task); and what a client of
    it needs in its environment."""
    auth = token_auth()
    env = child_env(**auth, OPENAI_API_KEY=PLANTED)
    with started_head(env, num_cpus=1) as (address, _):
        yield address, auth


@pytest.mark.slow
def test_faults_in_ray_workers_are_retried_and_recorded_as_in_threads(
    tmp_path: Path, fault_head: tuple[str, dict[str, str]]
) -> None:
    address, auth = fault_head
    out = tmp_path / "run"
    with FaultServer(error_rate=0.1, rate_limit_rate=0.1, drop_rate=0.05) as server:
        proc = pxn_run(
            "--out", out, "--task", "plugin_task:make_failing_task", "--task-model", "openai/fault",
            "--reflection-model", "openai/fault", "--api-base", server.api_base, "--shape", "2x2",
            "--budget", "30", "--workers", "2", "--backend", "ray", "--address", address,
            env=child_env(**auth, OPENAI_API_KEY=PLANTED),  # the driver's own calls: reflections
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    _, rollouts = check_ray_trace(out, workers=2)
    trace = read_trace(out / "trace.jsonl")
    assert trace.run_start.meta["ray_address"] == address
    # Each injected fault is one failed attempt, on the slot of the rollout that met it.
    attempts = trace.of(Attempt)
    assert len(attempts) == sum(server.faults.values()) > 0
    assert {a.worker for a in attempts if a.call == "rollout"} <= {0, 1}
    # The always-failing example exhausted its retries in the worker, scored 0, run went on.
    bad = [r for r in rollouts if r.example == "val/8"]
    assert bad and all(r.score == 0.0 and r.error and r.attempts == 4 for r in bad)
    # The workers' key reached the server, and is written nowhere.
    assert any(PLANTED in auth for auth in server.seen_auth)
    assert PLANTED not in all_text(out) + proc.stdout + proc.stderr
