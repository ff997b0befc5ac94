"""What a run waits for: how long at most, and telling it on stderr as the wait starts.

Network waits and server start-ups can take a while; a person should see what
is awaited and for how long at most, not a silent terminal. A caller passes
`on_stderr`, or `quiet` (a library user, `--no-progress`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

Tell = Callable[[str], None]
PROBE_TIMEOUT = 30.0  # seconds for a model to answer the probe before a run, retries included


def on_stderr(text: str) -> None:
    print(f"pxn: {text}", file=sys.stderr, flush=True)


def quiet(text: str) -> None:
    """Tell no one."""
