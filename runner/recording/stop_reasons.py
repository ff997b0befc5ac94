"""Which stopping condition ended a run, said in run_end's message.

gepa 0.1.4 asks its stoppers at the top of each iteration as one
CompositeStopper in "any" mode: the first that says stop ends the run and
the ones after it are not asked. Their order is fixed by gepa: the user's
stop_callbacks as given (the recorder's own stopper last among them), then
those gepa builds from its arguments: the file stopper on run_dir/gepa.stop,
max_metric_calls, max_candidate_proposals (optimize_anything only) and
max_reflection_cost.

The user's stoppers are wrapped (`WatchedStopper`) to see which one said
stop; the wrapper has every attribute of the stopper it wraps (gepa reads
`max_metric_calls` off each stopper to tell its callbacks the budget left).
gepa's own are free of side effects, so they are asked again, in gepa's
order, once the loop is over: the first that holds is the one that ended it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class WatchedStopper:
    """A user's stopper, called as gepa calls it, noting when it first says stop."""

    def __init__(self, inner: Any, watch: StopWatch):
        self.inner = inner
        self._watch = watch

    def __call__(self, state: Any) -> bool:
        stop = bool(self.inner(state))
        if stop:
            self._watch.said_stop(self.inner)
        return stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class StopWatch:
    """The stopping conditions of one run: the user's, watched, and gepa's own, read."""

    run_dir: Path
    max_metric_calls: int | None = None
    max_candidate_proposals: int | None = None
    max_reflection_cost: float | None = None
    reflection_lm: Any = None  # what gepa reads total_cost from for max_reflection_cost
    first: Any = None  # the user's stopper that said stop first
    names: list[str] = field(default_factory=list)  # the user's stoppers, described

    def watched(self, stoppers: list[Any]) -> list[WatchedStopper]:
        self.names = [describe(s) for s in stoppers]
        return [WatchedStopper(s, self) for s in stoppers]

    def said_stop(self, stopper: Any) -> None:
        if self.first is None:
            self.first = stopper

    def ended_by(self, state: Any) -> str:
        """What ended the run, in words ("" when nothing known to gepa did: it raised)."""
        if self.first is not None:
            return f"ended by {describe(self.first)}"
        if state is None:
            return ""
        if (self.run_dir / "gepa.stop").exists():
            return "ended by the stop file gepa.stop in gepa's run_dir"
        spent = state.total_num_evals
        if self.max_metric_calls is not None and spent >= self.max_metric_calls:
            return f"ended by max_metric_calls: {spent} metric calls of {self.max_metric_calls}"
        proposals = self.max_candidate_proposals
        if proposals is not None and state.i >= proposals - 1:
            # gepa's MaxCandidateProposalsStopper counts iterations (state.i), whatever P x N.
            return f"ended by max_candidate_proposals: {state.i + 1} iterations of {proposals}"
        cost = getattr(self.reflection_lm, "total_cost", 0.0)
        if self.max_reflection_cost is not None and cost >= self.max_reflection_cost:
            return (
                f"ended by max_reflection_cost: ${cost:.4f} of ${self.max_reflection_cost:.4f} "
                "spent on reflections"
            )
        return ""


# The settings that say what each of gepa's stoppers waits for.
_SETTINGS = {
    "TimeoutStopCondition": ("timeout_seconds", "timeout {} s"),
    "NoImprovementStopper": (
        "max_iterations_without_improvement",
        "{} iterations without improvement",
    ),
    "ScoreThresholdStopper": ("threshold", "score threshold {}"),
    "MaxMetricCallsStopper": ("max_metric_calls", "{} metric calls"),
    "MaxCandidateProposalsStopper": ("max_proposals", "{} iterations"),
    "MaxTrackedCandidatesStopper": ("max_tracked_candidates", "{} candidates"),
    "MaxReflectionCostStopper": ("max_reflection_cost_usd", "${}"),
}


def describe(stopper: Any) -> str:
    """A stopper as a person reads it: its class and what it waits for."""
    name = type(stopper).__name__
    setting = _SETTINGS.get(name)
    if setting is None or not hasattr(stopper, setting[0]):
        return name
    return f"{name} ({setting[1].format(getattr(stopper, setting[0]))})"
