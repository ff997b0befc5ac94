"""The stopper: ending a run whose calls keep failing instead of letting it run on for nothing.

gepa 0.1.4 logs a failed reflection and goes on, even with
raise_on_exception=True: a proposal that started but never ended failed
silently, and the run burns its budget. With raise_on_exception=False it
also logs an adapter call that raised and starts the next iteration, which
spends no budget: an adapter that always raises loops forever. After
`limit` such failures in a row, of either kind (max(5, 2 P N) unless given),
the stopper ends the run at the top of gepa's next iteration, with a reason
naming the last error.
"""

from __future__ import annotations

from typing import Any


def default_limit(p: int, n: int) -> int:
    """Failed reflections in a row allowed at shape P x N: two iterations' worth, at least 5."""
    return max(5, 2 * p * n)


class Failures:
    """Counts the proposals that failed silently, iteration by iteration, and the adapter
    calls that raised, call by call."""

    def __init__(self, limit: int):
        self._limit = limit
        self._in_a_row = 0
        self._last_error: str | None = None
        self._adapter_in_a_row = 0
        self.stop_reason: str | None = None

    def adapter_call_ended(self, error: str | None) -> None:
        """An adapter call returned (`error` None) or raised `error`."""
        self._adapter_in_a_row = 0 if error is None else self._adapter_in_a_row + 1
        if self._adapter_in_a_row >= self._limit and self.stop_reason is None:
            self.stop_reason = (
                f"stopped: {self._adapter_in_a_row} adapter calls in a row raised (last error: "
                f"{error}); check the adapter"
            )

    def failed(self, error: str) -> None:
        """A reflection call raised `error`."""
        self._last_error = error

    def iteration_ended(self, started: int, ended: int) -> None:
        """Of the iteration's proposals, `started` started and `ended` gave texts."""
        lost = started - ended
        self._in_a_row = lost if ended > 0 else self._in_a_row + lost
        if self._in_a_row >= self._limit and self.stop_reason is None:
            last = self._last_error
            self.stop_reason = (
                f"stopped: {self._in_a_row} reflections in a row produced no "
                f"proposal{f' (last error: {last})' if last else ''}; check the reflection model"
            )


class Stopper:
    """gepa's StopperProtocol over the failures' verdict (a plain callable is enough); gepa
    checks it at the top of every iteration."""

    def __init__(self, failures: Failures):
        self.failures = failures

    def __call__(self, state: Any) -> bool:
        return self.failures.stop_reason is not None
