"""A real Ray head on 127.0.0.1 for the tests: `ray start --head --block` in its own process group.

Ray 2.60 turns token authentication on for a `ray start` head when
~/.ray/auth_token exists, but a driver connecting by address sends the token
only when RAY_AUTH_MODE=token. So each head gets a token made for it
(`token_auth`), which its clients need in their environment too, and ~/.ray
is neither read nor needed.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"
STARTED = "Ray runtime started"


def free_port() -> int:
    """A port nothing listens on (the OS just handed it out and it was closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def token_auth() -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@contextmanager
def started_head(env: dict[str, str], num_cpus: int) -> Iterator[tuple[str, list[str]]]:
    """A head whose processes see `env`; yields (its address, its log so far) until stopped.

    Stopped by signalling the one `ray start` process, which drains and stops
    the Ray processes it started; killed with its group if it does not.
    """
    port = free_port()
    command = [
        str(RAY), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
        f"--port={port}", f"--num-cpus={num_cpus}", "--include-dashboard=false",
        "--disable-usage-stats",
    ]  # fmt: skip
    head = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: ours alone to clean up
        env={**env, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    log: list[str] = []
    assert head.stdout is not None
    for line in head.stdout:  # blocks until ray start says the node is up (or exits)
        log.append(line)
        if STARTED in line:
            break
    # Keep reading so the head never blocks on a full pipe.
    threading.Thread(target=lambda: log.extend(head.stdout), daemon=True).start()
    try:
        assert any(STARTED in line for line in log), "".join(log)
        yield f"127.0.0.1:{port}", log
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
