"""Connecting to Ray: a cluster at HOST:PORT, or a private local instance.

Shared by the simulator's Ray backend (sweeps, advise) and the runner's Ray
evaluation pool, which otherwise know nothing of each other. Ray is an
optional extra and slow to import: it is imported only when a connection is
opened.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from typing import Any

from pxn.errors import PxnError

RAY_EXTRA = "install the extra: pip install 'gepa-pxn[ray]'"
CONNECT_TIMEOUT = 5.0  # seconds to reach a Ray head's port before giving up


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

    def check_reachable(self) -> None:
        # ray.init retries an unreachable head for minutes, logging as it goes;
        # a plain TCP connect says the same in a few seconds.
        try:
            socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT).close()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise PxnError(
                f"cannot reach a Ray head at {self}: {reason}; "
                f"start one with `ray start --head --port {self.port}`"
            ) from None


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise PxnError(
            f"ray needs Ray, which is not installed; {RAY_EXTRA}", subject="backend"
        ) from None
    return ray


@dataclass
class RayConnection:
    """Ray at `address`, or a private local Ray of `num_cpus` CPUs.

    Without an address a Ray instance is started for this process alone and
    stopped on close. If Ray is already initialised in this process (a user's
    own script), that connection is used and left open.
    """

    address: str | None = None
    num_cpus: int | None = None
    _ray: Any = field(default=None, init=False, repr=False)
    _owned: bool = field(default=False, init=False, repr=False)

    def open(self) -> Any:
        """The connected `ray` module; errors here are the user's, one line each."""
        if self._ray is not None:
            return self._ray
        target = Address.parse(self.address) if self.address is not None else None
        ray = import_ray()
        if ray.is_initialized():
            self._ray = ray
            return ray
        if target is not None:
            target.check_reachable()
        options: dict[str, Any] = {
            # Errors only: a CLI user should not see "connecting to..." or the
            # token-authentication notice Ray 2.60 logs at each start.
            "logging_level": logging.ERROR,
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
