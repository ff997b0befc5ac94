"""Kill -9 mid-run leaves a valid-prefix trace and --resume continues it; Ctrl-C ends the
trace with run_end "interrupted", and Ctrl-C during the test split's scoring (after gepa's
loop) leaves the scoring to the resume. The `pxn` command runs as a real subprocess against
the fault server (answering slowly enough to be caught mid-run) or the local LM pool."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import PXN
from fault_server import FaultServer
from gepa.core.state import GEPAState

from pxn.runner.recording.totals import trace_totals
from pxn.runner.tasks import LMCall, Task
from pxn.runner.topic_task import TopicExample, make_topic_task
from pxn.runner.topic_task import program as topic_program
from pxn.trace import Decision, Iteration, Reflection, Resume, Rollout, RunEnd, RunStart
from pxn.trace_reading import read_trace

TESTS = str(Path(__file__).parent)


# Real runs of gepa against the fault server, killed and resumed: tens of seconds.
pytestmark = pytest.mark.slow


def ctrl_c_as_a_terminal_gives_it() -> None:
    """In the child before exec: SIGINT at its default and unblocked. An ignored SIGINT
    survives exec (something earlier in a full suite leaves the test process so: Ctrl-C
    then reached a run that finished with exit 0), and Python installs its Ctrl-C handler
    only where SIGINT is not ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def pxn_run(args: list[str], **env_extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-dummy-key", "PYTHONPATH": TESTS, **env_extra}
    return subprocess.Popen(
        [str(PXN), "run", "--no-progress", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_a_terminal_gives_it,
    )


def fault_args(out: Path, api_base: str, budget: int = 100) -> list[str]:
    return [
        "--out", str(out),
        "--task", "plugin_task:make_task",
        "--task-model", "openai/fault",
        "--reflection-model", "openai/fault",
        "--api-base", api_base,
        "--shape", "2x2",
        "--budget", str(budget),
        "--workers", "2",
    ]  # fmt: skip


def test_kill_9_then_resume_continues_the_same_trace(tmp_path):
    out = tmp_path / "run"
    with FaultServer(delay=0.05) as server:
        proc = pxn_run(fault_args(out, server.api_base))
        # Past the seed validation (8) and into the first iterations' minibatches.
        assert server.wait_served(40)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lines = (out / "trace.jsonl").read_text().splitlines()
        killed = read_trace(out / "trace.jsonl")
        # A valid prefix: at most the torn last line is skipped, and no run_end.
        assert killed.skipped in ([], [f"line {len(lines)}: truncated last line"])
        assert killed.run_end is None
        rollouts_before = len(killed.of(Rollout))

        resumed = pxn_run(["--resume", str(out)][:2] + fault_args(out, server.api_base)[2:])
        _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert "warning" not in stderr  # the end-of-run check found the totals equal
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == []
    assert sum(isinstance(e, RunStart) for e in trace.events) == 1
    assert len(trace.of(Resume)) == 1
    assert isinstance(trace.events[-1], RunEnd) and trace.events[-1].status == "completed"
    assert len(trace.of(Rollout)) > rollouts_before
    # Times keep counting on across the resume.
    resume_at = trace.of(Resume)[0].start
    assert resume_at >= max(e.end for e in killed.events)
    assert_whole_run_totals(out)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_ends_the_trace_with_interrupted(tmp_path, sig):
    out = tmp_path / "run"
    with FaultServer(delay=0.05) as server:
        proc = pxn_run(fault_args(out, server.api_base, budget=400))
        assert server.wait_served(30)
        proc.send_signal(sig)
        proc.communicate(timeout=120)
    assert proc.returncode != 0
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == []
    end = trace.events[-1]
    assert isinstance(end, RunEnd) and end.status == "interrupted"
    # The true count of metric calls made, not gepa's lagging one.
    assert end.metric_calls == len(trace.live(Rollout)) > 0


def assert_whole_run_totals(out: Path) -> None:
    """result.json and run_end count the whole run, as the trace and gepa's saved state do."""
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == []
    result = json.loads((out / "result.json").read_text())
    end = trace.events[-1]
    assert isinstance(end, RunEnd) and end.status == "completed"
    state = GEPAState.load(str(out / "gepa"))
    totals = trace_totals(trace)
    assert result["trace_check"] == "ok"
    assert result["metric_calls"] == end.metric_calls == state.total_num_evals
    assert result["metric_calls"] == totals.metric_calls
    assert result["iterations"] == end.iterations == state.i + 1 == len(trace.live(Iteration))
    assert result["accepted"] == len(state.program_candidates) - 1 == totals.accepted
    assert result["full_val_evals"] == state.num_full_ds_evals == totals.full_val_evals
    assert result["proposals"] == len(trace.live(Decision))
    assert result["reflection_calls"] == len(trace.of(Reflection))


def kill_at(proc: subprocess.Popen[str], server: FaultServer, out: Path, point: str) -> bool:
    """SIGKILL the run at `point`: "calls:K" once K more LM calls were served (inside a
    stage), "between" when the trace's last line is a stage or iteration end. False when
    the run finished first."""
    kind, _, arg = point.partition(":")
    trace = out / "trace.jsonl"
    served = server.served
    while proc.poll() is None:
        if kind == "calls" and server.wait_served(served + int(arg), timeout=0.05):
            break
        if kind == "between" and trace.exists():
            lines = trace.read_text().splitlines()
            last = lines[-1] if lines else ""
            if '"kind": "stage"' in last or '"kind": "iteration"' in last:
                break
            server.wait_served(server.served + 1, timeout=0.02)  # wait for the run to move
    else:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def test_sigkill_at_random_points_then_resume_keeps_whole_run_totals(tmp_path):
    """Killed five times (inside stages and between them), resumed each time, the run's
    final totals agree with its trace and with gepa's own state."""
    rng = random.Random(12)
    points = [f"calls:{rng.randint(5, 30)}" for _ in range(3)] + ["between", "between"]
    rng.shuffle(points)
    out = tmp_path / "run"
    killed = 0
    with FaultServer(delay=0.02) as server:
        args = fault_args(out, server.api_base, budget=160)
        proc = pxn_run(args)
        for point in points:
            killed += kill_at(proc, server, out, point)
            assert read_trace(out / "trace.jsonl").run_end is None
            proc = pxn_run(["--resume", str(out)])
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        served = server.served
        # Resuming the finished run says so, pays for nothing and changes nothing.
        files = {p: p.read_bytes() for p in (out / "trace.jsonl", out / "result.json")}
        again = pxn_run(["--resume", str(out)])
        stdout, stderr = again.communicate(timeout=120)
        assert again.returncode == 0, stderr
        assert "finished already" in stdout and len(stdout.strip().splitlines()) == 1
        assert server.served == served
    assert killed == len(points)
    assert {p: p.read_bytes() for p in files} == files
    trace = read_trace(out / "trace.jsonl")
    assert len(trace.of(Resume)) == killed
    assert sum(isinstance(e, RunEnd) for e in trace.events) == 1
    assert_whole_run_totals(out)


# ---- Ctrl-C while the test split is scored, on the local LM pool ----


def make_logged_task() -> Task:
    """The topics task, its program writing each example's id to $PXN_CALL_LOG before its
    LM call. With $PXN_TEST_READY and $PXN_TEST_GO naming FIFOs, the first test example
    writes a line to the first and waits until the second is closed: the test split's
    scoring is then surely under way, and unfinished, when the test interrupts it."""
    task = make_topic_task()
    log = Path(os.environ["PXN_CALL_LOG"])
    first_test = task.test[0].id

    def program(candidate: dict[str, str], example: TopicExample, lm: LMCall) -> str:
        with log.open("a", encoding="utf-8") as f:
            f.write(example.id + "\n")
        if example.id == first_test and "PXN_TEST_READY" in os.environ:
            with open(os.environ["PXN_TEST_READY"], "w", encoding="utf-8") as ready:
                ready.write("scoring the test split\n")
            with open(os.environ["PXN_TEST_GO"], encoding="utf-8") as go:
                go.read()  # until the test closes its end
        return topic_program(candidate, example, lm)

    return replace(task, name="topics-logged", program=program)


def read_line_while_running(fifo: int, proc: subprocess.Popen[str]) -> str:
    """The first line written to `fifo` (opened non-blocking), or "" if `proc` ends first."""
    while proc.poll() is None:
        readable, _, _ = select.select([fifo], [], [], 1.0)
        if readable:
            return os.read(fifo, 100).decode()
    return ""


@pytest.mark.lm
def test_ctrl_c_while_the_test_split_is_scored_leaves_it_to_the_resume(
    tmp_path, lm_pool, monkeypatch
):
    from pxn.runner.lm_records import PoolRecord

    # The `pxn run` children find the session's LM pool by its record, as a `pxn lm serve`.
    state = tmp_path / "state"
    monkeypatch.setenv("PXN_STATE_DIR", str(state))
    PoolRecord.for_this_process(
        started_by="the test session", shared=True, model=lm_pool.model, servers=lm_pool.servers
    ).save()
    out, log = tmp_path / "run", tmp_path / "calls.log"
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(ready)
    os.mkfifo(go)
    env = {"PXN_STATE_DIR": str(state), "PXN_CALL_LOG": str(log)}
    args = ["--out", str(out), "--task", "test_runner_resume:make_logged_task",
            "--shape", "2x2", "--budget", "20", "--workers", "2"]  # fmt: skip
    reader = os.open(ready, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = pxn_run(args, PXN_TEST_READY=str(ready), PXN_TEST_GO=str(go), **env)
        line = read_line_while_running(reader, proc)
        assert line == "scoring the test split\n", proc.communicate()[1]
        with open(go, "w"):  # the paused rollout waits on it until it is closed
            # gepa's loop is over and recorded: the trace already ends with its run_end.
            assert read_trace(out / "trace.jsonl").run_end.status == "completed"
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        os.close(reader)
    assert proc.returncode == 130, stderr
    assert "while the test split was scored" in stderr and "resuming the run" in stderr
    assert not (out / "result.json").exists()
    before = {p: p.read_bytes() for p in (out / "trace.jsonl", out / "gepa" / "gepa_state.bin")}
    loop_calls = log.read_text().splitlines()
    test_ids = [e.id for e in make_topic_task().test]
    assert test_ids[0] in loop_calls

    resumed = pxn_run(["--resume", str(out)], **env)
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert "gepa's loop had completed" in stdout and "test split" in stdout
    # Only the test split was run again, each example once; gepa's work stays as it was.
    assert sorted(log.read_text().splitlines()[len(loop_calls) :]) == sorted(test_ids)
    assert {p: p.read_bytes() for p in before} == before
    assert_whole_run_totals(out)
    result = json.loads((out / "result.json").read_text())
    assert result["test_score"] is not None and 0.0 <= result["test_score"] <= 1.0

    # A second resume says it finished in one line and changes nothing.
    files = {p: p.read_bytes() for p in (*before, out / "result.json", log)}
    again = pxn_run(["--resume", str(out)], **env)
    stdout, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr
    assert "finished already" in stdout and len(stdout.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in files} == files
