"""Where units of simulation work run: this process, local processes, or a Ray cluster.

A backend is handed a function and a list of argument tuples (the units) and
reports each unit's result as it finishes, in whatever order they finish.
`gather` puts the results back in unit order, so what a caller computes from
them cannot depend on the backend or on how the work was spread.

Ray is an optional extra and slow to import: it is imported only when a Ray
backend is opened (pxn.ray_cluster).

Stopping. Work that ends early (Ctrl-C, SIGTERM turned into an exception, an
error) ends every unit still queued or running: a local pool's processes are
terminated, not waited for. The pool's processes leave Ctrl-C (which a
terminal sends to them too) to this process, end at once on SIGTERM, and are
killed by the kernel if this process dies (Linux), so none outlives it.
"""

from __future__ import annotations

import concurrent.futures.process
import contextlib
import ctypes
import itertools
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pxn.errors import PxnError
from pxn.ray_cluster import Address, RayConnection

R = TypeVar("R")
BACKENDS = ("local", "ray")
WINDOW_PER_CPU, WINDOW_MIN = 4, 16  # Ray tasks in flight: per cluster CPU, and at least
STOPPING = {signal.SIGINT, signal.SIGTERM}
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


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
        pool = ProcessPoolExecutor(min(self.jobs, len(units)), initializer=worker_starts)
        try:
            # The processes are forked while the units are submitted: with Ctrl-C and
            # SIGTERM held back, so none can arrive before worker_starts sets them up.
            with signals_held(STOPPING):
                futures = {pool.submit(fn, *args): index for index, args in enumerate(units)}
            for future in as_completed(futures):
                yield futures[future], future.result()
        except BaseException:  # interrupted, failed, or the caller stopped asking
            terminate(pool)
            raise
        pool.shutdown()


def worker_starts() -> None:
    """In each pool process, before any unit: the parent alone answers Ctrl-C (it ends
    the pool), SIGTERM ends the process, and so does the parent's death."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


@contextlib.contextmanager
def signals_held(signals: set[signal.Signals]) -> Iterator[None]:
    """Hold `signals` back (in this thread, and in processes forked meanwhile); delivered after."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def terminate(pool: ProcessPoolExecutor) -> None:
    """Drop the queued units and end the running ones now, not when they finish."""
    # The executor has no public way to end running work (shutdown waits for it,
    # or leaves it running): its processes are terminated directly.
    processes = list((pool._processes or {}).values())
    call_queue, result_queue = pool._call_queue, pool._result_queue  # (shutdown lets go)
    manager = pool._executor_manager_thread
    pool.shutdown(wait=False, cancel_futures=True)
    # Units that fill the pipe (one scenario with its draws can) leave the call queue's
    # feeder thread blocked writing to the processes; once they are gone, the executor's
    # manager thread waits for that thread forever, and so does the exit (CPython
    # gh-94777: fixed in later 3.11 releases, not in Debian 12's 3.11.2). With this
    # process's reading end closed too, the write fails and both threads end. Closed
    # before the processes end, so the manager thread (which closes it there itself,
    # where fixed) cannot be closing it at the same moment.
    call_queue._reader.close()
    for process in processes:
        process.kill()  # not SIGTERM, which a stopped process, or one not yet started, holds
    for process in processes:
        process.join()
    # A process killed while writing a large result leaves the manager thread reading a
    # message that never ends, and the exit waits for that thread forever: this
    # process's own writing end was the last open one, and closing it ends the read.
    result_queue._writer.close()
    # The interpreter's exit wakes every pool's manager thread through a pipe the thread
    # closes as it ends: the two raced ("Exception ignored ... Bad file descriptor" on
    # stderr after the command's one line). This manager needs no waking (it sees its
    # processes gone), so the executor module's list of those to wake forgets it.
    if manager is not None:
        concurrent.futures.process._threads_wakeups.pop(manager, None)


@dataclass
class RayBackend(Backend):
    """Each unit a Ray task on the cluster at `address`, or on a private local Ray.

    Without an address a Ray instance of `num_cpus` CPUs is started for this
    process alone and stopped on close. With one, every node must have the
    same gepa-pxn installed (tasks import it by name), else results could differ.
    """

    address: str | None = None
    num_cpus: int | None = None
    name = "ray"
    _connection: RayConnection = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._connection = RayConnection(self.address, self.num_cpus)

    def open(self) -> None:
        self._connection.open()

    def close(self) -> None:
        self._connection.close()

    def run(self, fn: Callable[..., R], units: Sequence[tuple]) -> Iterator[tuple[int, R]]:
        ray = self._connection.open()
        task = ray.remote(num_cpus=1)(fn)
        # A few tasks per CPU in flight, not all of them: ray.wait scans its
        # whole list on every call, so with thousands pending the driver's CPU
        # per task grows with the work (its cost: experiments/bench/README.md).
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
        raise PxnError(f"is local or ray: got {kind!r}", subject="backend")
    if jobs < 1:
        raise PxnError(f"must be >= 1: got {jobs}", subject="jobs")
    if kind == "local":
        if address is not None:
            raise PxnError("is for the ray backend; drop it, or ask for that backend",
                           subject="ray address")  # fmt: skip
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
    # Closed on the way out, whatever the way: an interruption between two
    # results stops the backend's remaining work now, not when it is collected.
    with contextlib.closing(backend.run(fn, units)) as finished:
        for i, result in finished:
            results[i], done[i] = result, True
            if on_result is not None:
                on_result(i, result)
    if not all(done):  # a backend that lost a unit is a bug, never a short answer
        raise RuntimeError(f"{backend.name} backend returned {sum(done)} of {len(units)} units")
    return results
