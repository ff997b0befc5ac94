"""The trace as every part of the recorder writes to it: from any thread, until it is closed."""

from __future__ import annotations

import threading

from pxn.trace import Event, TraceWriter


class TraceSink:
    """Writes events one at a time; after `close`, drops them.

    After an interrupt, threads of the user's code may still finish a call while the
    trace is already closed by run_end: those late events are dropped.
    """

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
