"""The trace as every part of the recorder writes to it: from any thread, until it is closed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pxn.trace import Event, TraceWriter


class TraceSink:
    """Writes events one at a time; after `close` (run_end), drops the late events of the
    user's threads still finishing a call after an interrupt."""

    def __init__(self, writer: TraceWriter):
        self._writer = writer
        self._closed = False
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        with self._lock:
            if not self._closed:
                self._writer.write(event)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._writer.close()


class Slots:
    """Small slot numbers for work in flight: each interval takes the lowest slot none of whose
    intervals it overlaps, so as many slots are used as were busy at once (for intervals
    reported in start order; reported out of order, at worst a few more)."""

    def __init__(self) -> None:
        self._busy: list[list[tuple[float, float]]] = []
        self._lock = threading.Lock()

    def take(self, start: float, end: float) -> int:
        with self._lock:
            for slot, intervals in enumerate(self._busy):
                if all(e <= start or end <= s for s, e in intervals):
                    intervals.append((start, end))
                    return slot
            self._busy.append([(start, end)])
            return len(self._busy) - 1

    def forget_before(self, time: float) -> None:
        """Work that ended before `time` can overlap nothing reported from now on."""
        with self._lock:
            self._busy = [[(s, e) for s, e in slot if e > time] for slot in self._busy]


class InFlight:
    """The lowest slot free right now, for work timed as it starts and ends."""

    def __init__(self) -> None:
        self._busy: set[int] = set()
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[int]:
        with self._lock:
            slot = next(i for i in range(len(self._busy) + 1) if i not in self._busy)
            self._busy.add(slot)
        try:
            yield slot
        finally:
            with self._lock:
                self._busy.discard(slot)
