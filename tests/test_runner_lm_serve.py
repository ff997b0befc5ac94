"""Real llama.cpp pools, recorded one file each: `pxn lm serve`, `pxn lm list` and `pxn lm stop`
from another shell, a `pxn run` killed with SIGKILL, a server that fails to start.

Each test has a state directory of its own (PXN_STATE_DIR), so it sees only
its own pools. Every wait on a child is on a line it prints, never a sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from conftest import PXN

from pxn.errors import PxnError
from pxn.runner.lm_pool import LMPool, running_pool
from pxn.runner.lm_records import read_records

pytestmark = pytest.mark.lm


def _alive(pid: int) -> bool:
    """A process runs under this pid (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def pxn(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PXN), *args], env=env, capture_output=True, text=True, timeout=120)


@contextmanager
def served(env: dict[str, str]) -> Iterator[tuple[str, list[str], subprocess.Popen[str]]]:
    """A `pxn lm serve --lm-servers 1`, once it says it is ready: (its pool id, its api_bases,
    the process); terminated on the way out if a test left it up."""
    serve = subprocess.Popen(
        [str(PXN), "lm", "serve", "--lm-servers", "1"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert serve.stdout is not None
        pool, bases = "", []
        for line in serve.stdout:  # blocks until the pool reports itself ready
            if line.startswith("pool "):
                pool = line.split()[1].rstrip(":")
            if "api_base:" in line:
                bases.append(line.split("api_base:")[1].split()[0])
            if "stops the pool" in line:
                break
        yield pool, bases, serve
    finally:
        if serve.poll() is None:
            serve.terminate()
        serve.wait(timeout=60)


def answers(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/models", timeout=10) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_serve_then_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PXN_STATE_DIR", str(tmp_path))
    env = {**os.environ}
    with served(env) as (pool, bases, serve):
        assert len(bases) == 1 and answers(bases[0])
        records, _ = read_records()
        assert [r.id for r in records] == [pool]
        pids = [s.pid for s in records[0].servers]
        logs = Path(records[0].log_dir)
        assert (logs / "lm-server-0.log").stat().st_size > 0  # under the state directory
        # `pxn run` would use this pool rather than start its own.
        found = running_pool()
        assert found is not None and [s.api_base for s in found.servers] == bases
        stop = pxn("lm", "stop", env=env)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout == f"stopped 1 server(s) of pool {pool} (pxn lm serve)\n"
        assert not any(_alive(pid) for pid in pids)
        assert serve.wait(timeout=30) == 0  # the serving process ended too
    assert read_records() == ([], [])
    assert not logs.exists()  # a standalone pool's logs go with it
    assert running_pool() is None
    # A second stop finds nothing to stop: one clear line, exit 2.
    again = pxn("lm", "stop", env=env)
    assert again.returncode == 2 and "nothing to stop" in again.stderr


def test_two_serves_are_recorded_apart_and_stopped_one_by_one(tmp_path: Path) -> None:
    env = {**os.environ, "PXN_STATE_DIR": str(tmp_path)}
    with ExitStack() as stack:
        first, first_bases, first_serve = stack.enter_context(served(env))
        second, second_bases, second_serve = stack.enter_context(served(env))
        assert first != second
        listed = pxn("lm", "list", env=env)
        assert listed.returncode == 0, listed.stderr
        assert [line.split(":")[0] for line in listed.stdout.splitlines()] == sorted(
            [f"pool {first}", f"pool {second}"]
        )
        # Which one? `pxn lm stop` alone does not guess.
        which = pxn("lm", "stop", env=env)
        assert which.returncode == 2 and "2 pools are running" in which.stderr
        assert answers(first_bases[0]) and answers(second_bases[0])

        one = pxn("lm", "stop", first, env=env)
        assert one.stdout == f"stopped 1 server(s) of pool {first} (pxn lm serve)\n"
        assert first_serve.wait(timeout=30) == 0
        assert not answers(first_bases[0])
        assert answers(second_bases[0])  # the other pool is untouched

        rest = pxn("lm", "stop", "--all", env=env)
        assert rest.stdout == f"stopped 1 server(s) of pool {second} (pxn lm serve)\n"
        assert second_serve.wait(timeout=30) == 0
        assert not answers(second_bases[0])
    assert not list((tmp_path / "pools").iterdir())


def test_the_servers_of_a_killed_run_are_stopped_by_lm_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PXN_STATE_DIR", str(tmp_path / "state"))
    env = {**os.environ}
    out = tmp_path / "run"
    run = subprocess.Popen(
        [str(PXN), "run", "--out", str(out), "--budget", "200", "--lm-servers", "2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert run.stderr is not None
        told = []
        for line in run.stderr:  # blocks until the run says its pool is up
            told.append(line)
            if "LM pool" in line and "is up" in line:
                break
        assert told[0] == (
            f"pxn: starting 2 llama.cpp server(s), up to 120 s; logs in {out / 'lm-logs'}\n"
        )
        run.send_signal(signal.SIGKILL)  # no handler runs: the servers are orphaned
        assert run.wait(timeout=30) == -signal.SIGKILL
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    (record,), _ = read_records()
    assert record.started_by == "pxn run" and record.log_dir == str(out / "lm-logs")
    pids = [s.pid for s in record.servers]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)  # left behind, as the issue says
    listed = pxn("lm", "list", env=env)
    assert f"started by pxn run (pid {run.pid}, gone)" in listed.stdout

    stop = pxn("lm", "stop", env=env)
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout == f"stopped 2 server(s) of pool {record.id} (pxn run)\n"
    assert not any(_alive(pid) for pid in pids)
    assert not list((tmp_path / "state" / "pools").iterdir())
    # The run's server logs stay in its run directory, nowhere else.
    assert sorted(p.name for p in (out / "lm-logs").iterdir()) == [
        "lm-server-0.log", "lm-server-1.log",
    ]  # fmt: skip


def test_a_server_that_fails_to_start_is_named_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's server refuses zero threads and exits at once: a real failed start.
    monkeypatch.setenv("PXN_STATE_DIR", str(tmp_path / "state"))
    logs = tmp_path / "logs"
    with pytest.raises(PxnError) as failed:
        LMPool(1, threads=0, log_dir=logs, remove_logs=True).start()
    log = logs / "lm-server-0.log"
    assert f"exited with code 1 while loading; see its log at {log}" in str(failed.value)
    assert "n_threads" in log.read_text()  # kept, though the pool's logs go when it stops
    assert read_records() == ([], [])  # and no record of a pool that never was
