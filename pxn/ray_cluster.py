"""Connecting to Ray: a cluster at HOST:PORT, or a private local instance.

Shared by the simulator's Ray backend and the runner's Ray evaluation pool. Ray
is an optional extra, slow to import: it is imported only when a connection opens.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pxn.errors import PxnError

RAY_MISSING = (
    "ray needs Ray, which is not installed; install the extra: pip install 'gepa-pxn[ray]'"
)
CONNECT_TIMEOUT = 5.0  # seconds for a Ray head to answer, unless PXN_CONNECT_TIMEOUT says
CONNECT_TIMEOUT_VAR = "PXN_CONNECT_TIMEOUT"
# A Ray head's address is its GCS, a gRPC server: HTTP/2, which answers a client's
# connection preface with a SETTINGS frame (type 4) before anything else.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(
    [0, 0, 0, 4, 0, 0, 0, 0, 0]  # an empty SETTINGS frame: length 0, type 4, stream 0
)
FRAME_HEADER, SETTINGS = 9, 4


def connect_timeout() -> float:
    """Seconds to wait for a Ray head: $PXN_CONNECT_TIMEOUT, or 5."""
    text = os.environ.get(CONNECT_TIMEOUT_VAR)
    if text is None:
        return CONNECT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise PxnError(
            f"is seconds to wait for a Ray head, a number > 0: got {text!r}",
            subject=CONNECT_TIMEOUT_VAR,
        )
    return seconds


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise PxnError(
                f"is HOST:PORT of a Ray head, e.g. 127.0.0.1:6379: got {text!r}",
                subject="ray address",
            )
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    def check_reachable(self, timeout: float | None = None) -> None:
        """A Ray head answers here within `timeout` seconds (default: connect_timeout()):
        what ray.init finds out only after minutes of retries."""
        timeout = connect_timeout() if timeout is None else timeout
        deadline = time.monotonic() + timeout
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.sendall(HTTP2_PREFACE)
                header = _read_up_to(sock, FRAME_HEADER)
        except TimeoutError:
            raise PxnError(
                f"no Ray head answered at {self} within {timeout:g} s (it accepted the "
                f"connection but sent nothing); check the address, or wait longer with "
                f"{CONNECT_TIMEOUT_VAR}=SECONDS"
            ) from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise PxnError(
                f"cannot reach a Ray head at {self}: {reason}; "
                f"start one with `ray start --head --port {self.port}`"
            ) from None
        if len(header) < FRAME_HEADER or header[3] != SETTINGS:
            raise PxnError(
                f"the server at {self} is not a Ray head (it does not speak gRPC); "
                "give the head's GCS address, the one `ray start --head` prints"
            )


def _read_up_to(sock: socket.socket, size: int) -> bytes:
    """Up to `size` bytes: fewer only if the peer closed the connection first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


@dataclass
class RayConnection:
    """Ray at `address`, or a private local Ray of `num_cpus` CPUs, stopped on close. A Ray
    this process initialised already (a user's own script) is used and left open."""

    address: str | None = None
    num_cpus: int | None = None
    _ray: Any = field(default=None, init=False, repr=False)
    _owned: bool = field(default=False, init=False, repr=False)

    def open(self) -> Any:
        """The connected `ray` module; errors here are the user's, one line each."""
        if self._ray is not None:
            return self._ray
        target = Address.parse(self.address) if self.address is not None else None
        imported = sys.modules.get("ray")
        if target is not None and not (imported is not None and imported.is_initialized()):
            target.check_reachable()  # before Ray's import, which takes seconds
        try:
            import ray
        except ImportError:
            raise PxnError(RAY_MISSING, subject="backend") from None
        if ray.is_initialized():
            self._ray = ray
            return ray
        options: dict[str, Any] = {
            "logging_level": logging.ERROR,  # no "connecting to..." notices for a CLI user
            "log_to_driver": False,  # workers' own output stays in Ray's logs
        }
        if target is None:
            options |= {"address": "local", "num_cpus": self.num_cpus, "include_dashboard": False}
        else:
            options["address"] = str(target)
        try:
            ray.init(**options)
        except ConnectionError as exc:
            # Reachable but refused: most often a token-authenticated head and a
            # client without RAY_AUTH_MODE=token (Ray 2.60 only sends it then).
            raise PxnError(
                f"cannot connect to Ray at {target}: {exc}; if the head uses token "
                "authentication, set RAY_AUTH_MODE=token and the head's token "
                "(RAY_AUTH_TOKEN or ~/.ray/auth_token)"
            ) from None
        self._ray, self._owned = ray, True
        return ray

    def close(self) -> None:
        if self._ray is not None and self._owned:
            self._ray.shutdown()
        self._ray, self._owned = None, False
