"""Ctrl-C and SIGTERM end a command the same way: the work stops, one line says so,
and the exit code is the shell's for the signal (130, 143).
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from pxn.api.console import STOPPED_AFTER


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: handled wherever Ctrl-C is."""


def raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextmanager
def stopped_by_signals(left: str = "nothing written") -> Iterator[None]:
    """Within: Ctrl-C or SIGTERM ends the command with one line on stderr, naming how far
    the work got when it was cut short (WorkProgress.told_when_stopped notes it on the
    interrupt) and what that `left` behind."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, raise_terminated) if in_main_thread else None
    try:
        yield
    except KeyboardInterrupt as exc:
        how, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        notes = getattr(exc, "__notes__", [])
        told = next((f": {note}; {left}" for note in notes if note.startswith(STOPPED_AFTER)), "")
        print(f"pxn: {how}{told}", file=sys.stderr)
        # The heap of a stopped run (gepa, litellm: seconds to collect on a busy machine)
        # is left to the exit instead of being collected object by object on the way out.
        gc.freeze()
        raise typer.Exit(code) from None
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
