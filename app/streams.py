"""Standard output and error for a reader that may stop reading (`pxn ... | head`):
what is still printed is dropped, silently, and the work goes on to its end.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class ReaderMayLeave:
    """A text stream that drops its output once its reader has gone (a broken pipe)."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self.drop_the_rest()
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.drop_the_rest()

    def drop_the_rest(self) -> None:
        """Point the stream's descriptor at the null device: what it still holds, and the
        interpreter's last flush, go nowhere instead of failing again."""
        self.reader_gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def readers_may_leave() -> Iterator[None]:
    """sys.stdout and sys.stderr guarded while the command runs, flushed before it ends."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ReaderMayLeave(sys.stdout), ReaderMayLeave(sys.stderr)
    try:
        yield
    finally:
        for guarded in (sys.stdout, sys.stderr):
            guarded.flush()
        sys.stdout, sys.stderr = streams
