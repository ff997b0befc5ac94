"""Where units of simulation work run: this process, local processes, or a Ray cluster.

A backend is handed a function and a list of argument tuples (the units) and
reports each unit's result as it finishes, in whatever order they finish.
`gather` puts the results back in unit order, so what a caller computes from
them cannot depend on the backend or on how the work was spread.

Ray is an optional extra and slow to import: it is imported only when a Ray
backend is opened.
"""

from __future__ import annotations

import itertools
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pxn.errors import PxnError

R = TypeVar("R")
BACKENDS = ("local", "ray")
RAY_EXTRA = "install the extra: pip install 'gepa-pxn[ray]'"
CONNECT_TIMEOUT = 5.0  # seconds to reach a Ray head's port before giving up
WINDOW_PER_CPU, WINDOW_MIN = 4, 16  # Ray tasks in flight: per cluster CPU, and at least


class Backend:
    """Runs units of work; `open` before the first `run`, `close` after the last.

    Used as a context manager; `run` may be called many times in between (a
    grid search reuses one connection for all its points).
    """

    name = "backend"

    def open(self) -> None:
        """Acquire what the backend needs (a connection); errors here are the user's."""

    def close(self) -> None:
        """Release it."""

    def run(self, fn: Callable[..., R], units: Sequence[tuple]) -> Iterator[tuple[int, R]]:
        """Yield (unit index, fn(*unit)) as each unit finishes."""
        raise NotImplementedError

    def __enter__(self) -> Backend:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class LocalBackend(Backend):
    """This process (jobs = 1) or a pool of `jobs` processes on this machine."""

    jobs: int = 1
    name = "local"

    def run(self, fn: Callable[..., R], units: Sequence[tuple]) -> Iterator[tuple[int, R]]:
        if self.jobs == 1 or len(units) <= 1:
            for index, args in enumerate(units):
                yield index, fn(*args)
            return
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(units))) as pool:
            futures = {pool.submit(fn, *args): index for index, args in enumerate(units)}
            for future in as_completed(futures):
                yield futures[future], future.result()


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise PxnError(
                f"--address is HOST:PORT of a Ray head, e.g. 127.0.0.1:6379: got {text!r}"
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
        raise PxnError(f"--backend ray needs Ray, which is not installed; {RAY_EXTRA}") from None
    return ray


@dataclass
class RayBackend(Backend):
    """Each unit a Ray task on the cluster at `address`, or on a private local Ray.

    Without an address a Ray instance is started for this process alone with
    `num_cpus` CPUs and stopped on close. With one, every node must have the
    same gepa-pxn installed (tasks import it by name), else results could differ.
    If Ray is already initialised in this process (a user's own script), that
    connection is used and left open.
    """

    address: str | None = None
    num_cpus: int | None = None
    name = "ray"
    _ray: Any = field(default=None, init=False, repr=False)
    _owned: bool = field(default=False, init=False, repr=False)

    def open(self) -> None:
        if self._ray is not None:
            return
        target = Address.parse(self.address) if self.address is not None else None
        ray = import_ray()
        if ray.is_initialized():
            self._ray = ray
            return
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

    def close(self) -> None:
        if self._ray is not None and self._owned:
            self._ray.shutdown()
        self._ray, self._owned = None, False

    def run(self, fn: Callable[..., R], units: Sequence[tuple]) -> Iterator[tuple[int, R]]:
        self.open()
        ray = self._ray
        task = ray.remote(num_cpus=1)(fn)
        # A few tasks per CPU in flight, not all of them: ray.wait scans its
        # whole list on every call, and with thousands pending that cost the
        # driver ~1 ms of CPU per task (experiments/bench/README.md).
        window = max(WINDOW_MIN, WINDOW_PER_CPU * int(ray.cluster_resources().get("CPU", 1)))
        todo = iter(enumerate(units))
        index: dict[Any, int] = {}

        def submit(n: int) -> None:
            for i, args in itertools.islice(todo, n):
                index[task.remote(*args)] = i

        submit(window)
        try:
            while index:
                # Block for one, then take whatever else is already done without
                # waiting, so progress is told promptly and ray.wait is called
                # fewer times than there are tasks.
                ready, pending = ray.wait(list(index), num_returns=1)
                if pending:
                    ready += ray.wait(pending, num_returns=len(pending), timeout=0)[0]
                results = ray.get(ready)
                done = [index.pop(ref) for ref in ready]
                submit(len(ready))  # before handing results over: keep the cluster busy
                yield from zip(done, results, strict=True)
        finally:
            # Interrupted or failed: do not leave the cluster busy with our work.
            for ref in index:
                ray.cancel(ref)


def make_backend(kind: str, address: str | None = None, jobs: int = 1) -> Backend:
    """The backend a user asked for by name; `jobs` sizes a local pool or a private Ray."""
    if kind not in BACKENDS:
        raise PxnError(f"--backend is local or ray: got {kind!r}")
    if jobs < 1:
        raise PxnError(f"--jobs must be >= 1: got {jobs}")
    if kind == "local":
        if address is not None:
            raise PxnError("--address is for --backend ray; drop it or add --backend ray")
        return LocalBackend(jobs)
    if address is not None:
        Address.parse(address)  # a malformed address fails before any work
    return RayBackend(address, num_cpus=None if address is not None else jobs)


def gather(
    backend: Backend,
    fn: Callable[..., R],
    units: Sequence[tuple],
    on_result: Callable[[int, R], None] | None = None,
) -> list[R]:
    """fn(*unit) for every unit, in unit order; `on_result(i, r)` as each finishes.

    `fn` must be a Python function (Ray refuses builtins) whose module the
    workers can import, and the units picklable.
    """
    results: list[Any] = [None] * len(units)
    done = [False] * len(units)
    for i, result in backend.run(fn, units):
        results[i], done[i] = result, True
        if on_result is not None:
            on_result(i, result)
    if not all(done):  # a backend that lost a unit is a bug, never a short answer
        raise RuntimeError(f"{backend.name} backend returned {sum(done)} of {len(units)} units")
    return results
