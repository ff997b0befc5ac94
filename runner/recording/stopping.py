"""Ending a run whose calls keep failing, and which stopping condition ended a run.

gepa 0.1.4 logs a failed reflection and goes on, burning its budget; with
raise_on_exception=False it also logs an adapter call that raised and starts
the next iteration, spending nothing, so an adapter that always raises loops
forever. After `limit` failures in a row of either kind the stopper ends the
run at the top of gepa's next iteration, naming the last error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def default_limit(p: int, n: int) -> int:
    """Failed reflections in a row allowed at shape P x N: two iterations' worth, at least 5."""
    return max(5, 2 * p * n)


class Failures:
    """Counts the proposals that failed silently, iteration by iteration, and the adapter
    calls that raised, call by call; as gepa's stopper (checked at the top of every
    iteration), it stops the run once there is a stop reason."""

    def __init__(self, limit: int):
        self._limit = limit
        self._in_a_row = 0
        self._last_error: str | None = None
        self._adapter_in_a_row = 0
        self.stop_reason: str | None = None

    def __call__(self, state: Any) -> bool:
        return self.stop_reason is not None

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


class WatchedStopper:
    """A user's stopper, called as gepa calls it, noting when it first says stop; it has the
    inner stopper's attributes (gepa reads `max_metric_calls` off each stopper)."""

    def __init__(self, inner: Any, watch: StopWatch):
        self.inner = inner
        self._watch = watch

    def __call__(self, state: Any) -> bool:
        stop = bool(self.inner(state))
        if stop and self._watch.first is None:
            self._watch.first = self.inner
        return stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class StopWatch:
    """Which stopping condition ended a run, for run_end's message.

    gepa asks its stoppers in a fixed order (the user's, the recorder's last, then the
    stop file, max_metric_calls, max_candidate_proposals, max_reflection_cost) and the
    first that says stop ends the run. The user's are watched as they are called;
    gepa's own have no side effects, so they are asked again once the loop is over.
    """

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
