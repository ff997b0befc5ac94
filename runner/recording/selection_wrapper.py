"""gepa's selection strategy, wrapped to tell the recorder every proposal and which were chosen."""

from __future__ import annotations

from typing import Any

from pxn.runner.recording.recorder import Recorder


class RecordingSelection:
    """Wraps gepa's selection strategy to see every proposal and which were chosen."""

    def __init__(self, inner: Any, recorder: Recorder):
        self.inner = inner
        self.recorder = recorder

    def select(self, proposals: list[Any], state: Any, acceptance_criterion: Any) -> list[Any]:
        chosen = self.inner.select(proposals, state, acceptance_criterion)
        self.recorder.selected(proposals, chosen)
        return chosen
