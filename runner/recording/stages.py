"""The stages of an iteration as trace events.

A rollout stage spans the adapter calls of one phase, from the first call's
start to the last call's end (gepa's pair-by-pair fallback makes several calls
of one stage), and is written when gepa moves on ("settled": a callback, the
selection, or an adapter call of another phase). The reflection stage spans
from the parent minibatch's end to the child minibatch's start, or to the
iteration's end when no child was evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass

from pxn.runner.recording.sink import TraceSink
from pxn.trace import Stage


@dataclass
class OpenStage:
    name: str
    start: float
    end: float


class Stages:
    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._iteration = 0
        self._open: OpenStage | None = None
        self._reflection_start: float | None = None  # the parent minibatch's end

    def new_iteration(self, number: int) -> None:
        """gepa starts iteration `number`: the stage in flight was the last one's."""
        self.settle()
        self._iteration = number
        self._reflection_start = None

    def open(self, phase: str, start: float) -> None:
        """An adapter call of `phase` starts at `start`."""
        if self._open is not None and self._open.name == phase:
            return  # one more adapter call of the same stage (gepa's pair-by-pair fallback)
        self.settle()
        if phase == "child_minibatch" and self._reflection_start is not None:
            self._write("reflection", self._reflection_start, start)
            self._reflection_start = None
        self._open = OpenStage(phase, start, start)

    def extend(self, end: float) -> None:
        """An adapter call of the stage in flight returned at `end`."""
        if self._open is not None:
            self._open.end = end

    def settle(self) -> None:
        """Close the rollout stage in flight, if any: gepa has moved on."""
        stage, self._open = self._open, None
        if stage is None:
            return
        self._write(stage.name, stage.start, stage.end)
        if stage.name == "parent_minibatch":
            self._reflection_start = stage.end

    def end_iteration(self, now: float) -> None:
        """The iteration ends at `now` (its rollout stage settled): reflections that ran with no
        child evaluated after them end here."""
        if self._reflection_start is not None:
            self._write("reflection", self._reflection_start, now)
            self._reflection_start = None

    def _write(self, name: str, start: float, end: float) -> None:
        self._sink.write(Stage(start=start, end=end, iteration=self._iteration, name=name))
