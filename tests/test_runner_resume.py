"""Kill -9 mid-run leaves a valid-prefix trace and --resume continues it; Ctrl-C ends the
trace with run_end "interrupted". The `pxn` command runs as a real subprocess against the
fault server (answering slowly enough to be caught mid-run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import PXN
from fault_server import FaultServer

from pxn.trace import Resume, Rollout, RunEnd, RunStart, read_trace

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


def pxn_run(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-dummy-key", "PYTHONPATH": TESTS}
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
        "--task-lm", "openai/fault",
        "--reflection-lm", "openai/fault",
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
    result = json.loads((out / "result.json").read_text())
    assert result["trace_check"] == "ok"


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
    assert isinstance(trace.events[-1], RunEnd)
    assert trace.events[-1].status == "interrupted"
