"""Network waits are bounded, told, and fail in one line; LM pool records are read and cleaned.

The endpoints that never answer are real sockets (fault_server.SilentServer):
a listener that accepts and stays silent, which a wait bounded only by the
retries' own timeouts would hold `pxn run` on for minutes. The one timing bound
asserted is the requirement itself (seconds, not minutes), set generously
for a loaded 2-core machine. Pool records here point at real processes
(short-lived Python children); the real llama.cpp pools are in
test_runner_lm_serve.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PXN, assert_user_error, run_pxn
from fault_server import FaultServer, SilentServer

from pxn.runner.lm_records import PoolRecord, Server, read_records, start_time

SECONDS_NOT_MINUTES = 30.0  # a wait bounded at 2 s must end well inside this


# ---- the LM probe ----


def test_a_model_that_never_answers_fails_its_probe_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "never"
    with SilentServer() as silent:
        url = f"http://127.0.0.1:{silent.port}/v1"
        run = subprocess.Popen(
            [str(PXN), "run", "--out", str(out), "--task-model", "openai/x", "--reflection-model",
             "openai/x", "--api-base", url, "--probe-timeout", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "OPENAI_API_KEY": "sk-test-dummy"},
        )  # fmt: skip
        assert run.stderr is not None
        told = run.stderr.readline()  # blocks until the run says what it waits for
        waiting_from = time.monotonic()
        stdout, rest = run.communicate(timeout=300)
        waited = time.monotonic() - waiting_from
    assert told == f"pxn: waiting up to 2 s for the task model openai/x at {url}\n"
    assert run.returncode == 2
    lines = rest.splitlines()
    assert len(lines) == 1, rest
    assert lines[0] == (
        f"pxn: error: --probe-timeout of 2 s passed with no answer from the task model "
        f"openai/x at {url}; check the address, or allow a slow model more time"
    )
    assert waited < SECONDS_NOT_MINUTES
    assert stdout == ""
    assert not out.exists()


@pytest.mark.parametrize("seconds", ["0", "-1", "inf", "nan"])
def test_probe_timeout_is_positive_seconds(tmp_path: Path, seconds: str) -> None:
    out = tmp_path / "never"
    ran = run_pxn("run", "--out", out, "--no-progress", "--probe-timeout", seconds)
    assert_user_error(ran, "--probe-timeout must be seconds > 0")
    assert not out.exists()


# ---- the Ray head check ----


@pytest.fixture
def connect_in_2_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PXN_CONNECT_TIMEOUT", "2")


def sweep_on_ray(address: str):
    return run_pxn("sweep", "hover", "--reps", "5", "--backend", "ray", "--address", address)


def run_on_ray(out: Path, address: str):
    return run_pxn("run", "--out", out, "--no-progress", "--backend", "ray",
                   "--address", address)  # fmt: skip


@pytest.mark.parametrize("command", [sweep_on_ray, run_on_ray])
def test_a_silent_server_at_the_ray_address_is_refused_in_one_line(
    connect_in_2_s: None, tmp_path: Path, command
) -> None:
    with SilentServer() as silent:
        address = f"127.0.0.1:{silent.port}"
        start = time.monotonic()
        ran = command(address) if command is sweep_on_ray else command(tmp_path / "r", address)
        waited = time.monotonic() - start
    assert_user_error(
        ran, f"no Ray head answered at {address} within 2 s", "PXN_CONNECT_TIMEOUT=SECONDS"
    )
    assert waited < SECONDS_NOT_MINUTES


def test_an_http_server_at_the_ray_address_is_not_taken_for_a_head(connect_in_2_s: None) -> None:
    # It answers at once, but in HTTP/1.1: a Ray head's GCS speaks gRPC (HTTP/2).
    with FaultServer() as http:
        address = http.api_base.removeprefix("http://").removesuffix("/v1")
        ran = sweep_on_ray(address)
    assert_user_error(ran, f"the server at {address} is not a Ray head", "ray start --head")


@pytest.mark.parametrize("value", ["0", "soon", "-3", "inf"])
def test_connect_timeout_is_positive_seconds(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PXN_CONNECT_TIMEOUT", value)
    assert_user_error(
        sweep_on_ray("127.0.0.1:6379"),
        f"PXN_CONNECT_TIMEOUT is seconds to wait for a Ray head, a number > 0: got {value!r}",
    )


# ---- pool records ----


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PXN_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def ended_pid() -> int:
    """The pid of a process that has run and ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def record(
    owner: int,
    owner_started: int | None,
    port: int,
    logs: Path | None = None,
    started_by: str = "pxn run",
) -> PoolRecord:
    return PoolRecord(
        owner=owner,
        owner_started=owner_started,
        started_by=started_by,
        shared=False,
        model="openai/smollm2",
        servers=[Server(port=port, pid=ended_pid())],
        log_dir=None if logs is None else str(logs),
        remove_logs=logs is not None,
    )


def test_stale_records_are_removed_and_named(state: Path) -> None:
    gone = record(ended_pid(), 12345, port=40001)
    path = gone.save()
    listed = run_pxn("lm", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ("removed the record of pool 40001: its starter and servers are gone\n")
    assert listed.stdout == f"no LM pool is recorded in {state / 'pools'}\n"
    assert not path.exists()
    # A file that is no record is named and removed too.
    (state / "pools" / "junk.json").write_text("{not json", encoding="utf-8")
    stopped = run_pxn("lm", "stop")
    assert stopped.returncode == 2
    assert stopped.stderr.splitlines() == [
        f"removed {state / 'pools' / 'junk.json'}, not a pool record (JSONDecodeError)",
        f"pxn: error: no running LM pool is recorded in {state / 'pools'}; nothing to stop",
    ]
    assert read_records() == ([], [])


def test_stop_asks_which_of_several_then_stops_one_or_all(state: Path) -> None:
    # Two pools whose starters run (their servers are gone): `pxn lm stop` must end a pxn
    # starter, which stops its own servers on SIGTERM, as `pxn lm serve` and `pxn run` do,
    # and leave any other starter (a script) running.
    starters = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) for _ in "ab"
    ]
    try:
        records = []
        pools = zip(starters, (40011, 40012), ("pxn run", "python a.py"), strict=True)
        for starter, port, by in pools:
            logs = state / "logs" / str(port)
            records.append(record(starter.pid, start_time(starter.pid), port, logs, by))
            Path(records[-1].log_dir).mkdir(parents=True)
            records[-1].save()
        ambiguous = run_pxn("lm", "stop")
        assert_user_error(ambiguous, "2 pools are running (40011, 40012;", "--all")
        assert_user_error(run_pxn("lm", "stop", "40013"), "'40013' is no running pool's id")
        assert_user_error(run_pxn("lm", "stop", "40011", "--all"), "id or --all, not both")

        by_pid = run_pxn("lm", "stop", str(starters[0].pid))  # a starter's pid names it too
        assert by_pid.returncode == 0, by_pid.stderr
        assert by_pid.stdout == "stopped 0 server(s) of pool 40011 (pxn run)\n"
        assert starters[0].wait(timeout=60) == -15  # ended by SIGTERM
        assert starters[1].poll() is None
        assert not records[0].path.exists() and not Path(records[0].log_dir).exists()
        assert records[1].path.exists()

        every = run_pxn("lm", "stop", "--all")
        assert every.stdout == "stopped 0 server(s) of pool 40012 (python a.py)\n"
        assert starters[1].poll() is None  # a script is not ours to end
        assert read_records() == ([], [])
    finally:
        for starter in starters:
            starter.kill()
            starter.wait()
