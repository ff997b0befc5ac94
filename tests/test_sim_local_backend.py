"""A local pool ended early: its processes end at once, and the interpreter's exit does
not touch what is left of it."""

from __future__ import annotations

import concurrent.futures.process
import fcntl
import os
import signal
import struct
import termios
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from pxn.sim.backends import LocalBackend, terminate, worker_starts

PIPE_BYTES = 65536  # a Linux pipe's capacity


def test_a_pool_ended_early_is_not_woken_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit wakes every pool's manager thread through a pipe that thread closes as it
    ends; for a pool ended early the two raced and printed 'Exception ignored ... Bad
    file descriptor' after the command's one line. A pool's caller stopping after the
    first result (the generator closed, as an interrupt would) leaves no manager thread
    for the exit to wake. (The module's list holds its threads weakly; a plain dict here,
    so an ended thread's entry cannot vanish by itself and hide one left behind.)"""
    to_wake: dict = {}
    monkeypatch.setattr(concurrent.futures.process, "_threads_wakeups", to_wake)
    results = LocalBackend(jobs=2).run(time.sleep, [(0,), (600,), (600,)])
    assert next(results) == (0, None)
    assert len(to_wake) == 1  # the pool's manager, registered when the units were submitted
    results.close()  # GeneratorExit where the result was yielded: the pool is terminated
    assert to_wake == {}


def returned_when(flag: str, size: int) -> bytes:
    """A unit whose result (`size` bytes) is returned once the file `flag` exists."""
    while not os.path.exists(flag):
        time.sleep(0.01)
    return b"x" * size


@pytest.mark.timeout(120)  # a worker left stopped would hang terminate(): fail instead
def test_a_pool_ended_while_a_worker_writes_a_large_result_lets_the_exit_go(
    tmp_path: Path,
) -> None:
    """A worker killed halfway through writing its result left the pool's manager thread
    waiting for the rest of the message forever, and the interpreter's exit waits for that
    thread: `pxn validate` printed its one line after Ctrl-C and then never ended.

    Made certain here: while the test holds the pool's lock, the manager thread, having
    read the first (small) result, cannot read on, so the second (larger than the pipe)
    fills the pipe and its writer blocks; stopped there, it is killed by terminate()."""
    pool = ProcessPoolExecutor(1, initializer=worker_starts)
    first, second = tmp_path / "first", tmp_path / "second"
    pool.submit(returned_when, str(first), 1)
    pool.submit(returned_when, str(second), 8 * PIPE_BYTES)
    manager, result_pipe = pool._executor_manager_thread, pool._result_queue._reader
    (worker,) = pool._processes.values()
    while not pool._work_ids.empty():  # both units handed to the worker's queue
        time.sleep(0.01)
    with pool._shutdown_lock:
        first.touch()
        second.touch()
        # Half a pipe of the second result can only be there once it is being written, and
        # with eight pipes' worth to write, its writer cannot finish.
        while pipe_bytes(result_pipe.fileno()) < PIPE_BYTES // 2:
            time.sleep(0.01)
        os.kill(worker.pid, signal.SIGSTOP)
    terminate(pool)
    manager.join(timeout=60)
    assert not manager.is_alive()


def pipe_bytes(fd: int) -> int:
    """How many bytes wait unread in the pipe `fd`."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
