"""A local pool ended early: its processes end at once, and the interpreter's exit does
not touch what is left of it."""

from __future__ import annotations

import concurrent.futures.process
import time

import pytest

from pxn.sim.backends import LocalBackend


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
