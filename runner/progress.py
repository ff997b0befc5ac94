"""A live line while a real run goes: metric calls / budget, iteration, best score, time, ETA."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text


class LiveProgress:
    """Renders from the recording's progress snapshot; rich refreshes it from its own thread."""

    def __init__(
        self, snapshot: Callable[[], dict[str, Any]], budget: int, *, enabled: bool = True
    ):
        # iteration, accepted, best_val and metric_calls so far (gepa reports none for the
        # seed validation: the rollouts recorded count it).
        self.snapshot = snapshot
        self.budget = budget
        self.enabled = enabled
        self._t0 = time.perf_counter()
        self._live: Live | None = None

    def __rich__(self) -> Text:
        now = self.snapshot()
        used = now["metric_calls"]
        elapsed = time.perf_counter() - self._t0
        eta = elapsed * (self.budget - used) / used if 0 < used < self.budget else 0.0
        best = "-" if now["best_val"] is None else f"{now['best_val']:.3f}"
        return Text(
            f"metric calls {used}/{self.budget}  iteration {now['iteration']}  "
            f"accepted {now['accepted']}  best val {best}  "
            f"elapsed {elapsed:5.1f}s  eta {eta:5.1f}s"
        )

    def __enter__(self) -> LiveProgress:
        console = Console(stderr=True)
        # A live line only makes sense on a terminal; piped output stays clean.
        if self.enabled and console.is_terminal:
            self._live = Live(self, console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
