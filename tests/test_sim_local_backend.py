"""A local pool ended early: its processes end at once, and the interpreter's exit does
not touch what is left of it."""

from __future__ import annotations

import concurrent.futures.process
import time

from pxn.sim.backends import LocalBackend


def test_a_pool_ended_early_is_not_woken_at_exit() -> None:
    """The exit wakes every pool's manager thread through a pipe that thread closes as it
    ends; for a pool ended early the two raced and printed 'Exception ignored ... Bad
    file descriptor' after the command's one line. A pool's caller stopping after the
    first result (the generator closed, as an interrupt would) leaves no manager thread
    for the exit to wake."""
    known = set(concurrent.futures.process._threads_wakeups.keys())
    results = LocalBackend(jobs=2).run(time.sleep, [(0,), (600,), (600,)])
    assert next(results) == (0, None)
    results.close()  # GeneratorExit where the result was yielded: the pool is terminated
    left = set(concurrent.futures.process._threads_wakeups.keys()) - known
    assert left == set()
