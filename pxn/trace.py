"""The one trace schema: what happened in a batched GEPA run, event by event.

The real runner and the simulator both write it, so one summary serves
measured and simulated runs alike. A trace is JSON Lines, one event a line,
each flushed as it completes, so a crash leaves a valid prefix. Every event
has `start` and `end`, in seconds since the run started (an instant has
start == end). The first line is a `run_start` carrying the schema version.
pxn.trace_reading reads traces, pxn.run_summary summarizes a run.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TextIO

SCHEMA_VERSION = 3
# Readable versions: 2 is 3 without no_proposal events (its lost proposals inferred from its
# reflections), 1 is 2 without merges.
READABLE_VERSIONS = (1, 2, 3)

# Rollout phases, in the order gepa runs them: the seed's validation, then in an
# iteration either a merge's subsample (and, accepted, its full validation) or the
# proposals' minibatches (and the full validation of the children kept).
ROLLOUT_PHASES = ("seed_val", "merge_subsample", "parent_minibatch", "child_minibatch", "full_val")
# Stage names: the rollout phases plus the reflection stage between the minibatches.
STAGES = (*ROLLOUT_PHASES[:3], "reflection", *ROLLOUT_PHASES[3:])
# The stages only a run with gepa's merge on has.
MERGE_STAGES = ("merge_subsample",)


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str]  # its JSON "kind", given as `class Stage(Event, kind="stage")`
    start: float
    end: float

    def __init_subclass__(cls, *, kind: str, **rest: Any) -> None:
        super().__init_subclass__(**rest)
        cls.kind = kind

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, kw_only=True)
class RunStart(Event, kind="run_start"):
    """What was run: the shape, the budget and the pool. Always the first line."""

    schema: int = SCHEMA_VERSION
    source: str  # "sim" or "runner"
    shape: str  # "PxN", e.g. "2x2"; "1x1" for single
    budget: int  # metric calls
    workers: int  # W, rollouts at once
    reflection_concurrency: int
    valset_size: int
    trainset_size: int
    minibatch: int
    seed: int
    started_at: str = ""  # ISO wall-clock time of start (runner); "" for a simulation
    meta: dict[str, Any] = field(default_factory=dict)  # task, models, versions, scenario


@dataclass(frozen=True, kw_only=True)
class RunEnd(Event, kind="run_end"):
    status: str  # "completed", "interrupted" or "failed"
    metric_calls: int
    iterations: int
    message: str = ""
    # The most timed rollouts seen in flight at once (a recorded run; 0 when none was
    # timed); run_start's workers when that was not declared (0 there).
    workers: int | None = None


@dataclass(frozen=True, kw_only=True)
class Iteration(Event, kind="iteration"):
    """One gepa iteration, numbered as gepa's callbacks number it (from 1)."""

    iteration: int


@dataclass(frozen=True, kw_only=True)
class Stage(Event, kind="stage"):
    """One stage between two barriers: a name from STAGES. Iteration 0 is the seed."""

    iteration: int
    name: str


@dataclass(frozen=True, kw_only=True)
class Rollout(Event, kind="rollout"):
    """One metric call: one candidate run on one example, by one of the W workers."""

    iteration: int
    phase: str  # one of ROLLOUT_PHASES
    worker: int
    candidate: str  # gepa's candidate index, or the proposal id "i-j" of an unaccepted child
    example: str
    score: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1
    # The Ray node and task id (`pxn run --backend ray`); `worker` stays 0..W-1 there too.
    node: str | None = None
    task_id: str | None = None
    # False when nothing timed this rollout on its own (a recorded adapter running its
    # examples unreported): start and end are then the adapter call's, shared by its other
    # untimed rollouts, and `worker` a lane, not a worker.
    timed: bool = True


@dataclass(frozen=True, kw_only=True)
class Reflection(Event, kind="reflection"):
    """One reflection LM call proposing a child of `parent`."""

    iteration: int
    slot: int  # which of the C reflections in flight, 0..C-1
    proposal: str  # gepa's proposal id "i-j"
    parent: str
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1
    # Whether the reply held a ``` pair (without one gepa 0.1.4 takes the whole reply as
    # the new text); None when unknown (a simulation, a failed call).
    fenced: bool | None = None
    # The prompt's tokens before its first character differing from the previous prompt
    # recorded for the same parent by another job (prefix characters x tokens_in / prompt
    # characters): what a server that just served that prompt may reuse. None for the
    # parent's first job, or when the prompt or tokens_in is unknown.
    prefix_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class Attempt(Event, kind="attempt"):
    """One failed try of an LM call that was then retried or given up (the runner).

    The rollout or reflection event covers the whole call; its `attempts` counts
    these failed tries plus the last one.
    """

    iteration: int
    call: str  # "rollout" or "reflection"
    phase: str  # the rollout phase, or "reflection"
    worker: int  # the rollout's worker (0..W-1), or the reflection's slot (0..C-1)
    attempt: int  # 1-based
    error: str  # redacted one-line message


@dataclass(frozen=True, kw_only=True)
class Resume(Event, kind="resume"):
    """A resumed run continues here (`pxn run --resume`); times keep counting on.

    gepa resumes from the state saved at the top of iteration `iteration + 1`: events
    written before this one for later iterations were lost work (Trace.live).
    """

    iteration: int  # gepa iterations completed in the saved state
    metric_calls: int  # gepa's metric-call count in the saved state


@dataclass(frozen=True, kw_only=True)
class Validation(Event, kind="validation"):
    """A candidate's full-validation score as gepa recorded it (the runner; an instant).

    Iteration 0 is the seed. `candidate` is gepa's index in its pool.
    """

    iteration: int
    candidate: str
    score: float  # mean over the examples evaluated
    examples: int


@dataclass(frozen=True, kw_only=True)
class Budget(Event, kind="budget"):
    """gepa's own metric-call count after an increment (the runner; an instant).

    gepa sends none for the seed validation, so the first one already includes it.
    """

    iteration: int
    metric_calls: int
    delta: int


@dataclass(frozen=True, kw_only=True)
class Decision(Event, kind="decision"):
    """Whether a proposal beat its parent on the minibatch and joined the pool."""

    iteration: int
    proposal: str
    parent: str
    accepted: bool
    candidate: str | None = None  # the new candidate index when accepted
    score_before: float | None = None
    score_after: float | None = None


@dataclass(frozen=True, kw_only=True)
class Merge(Event, kind="merge"):
    """gepa's merge of two candidates sharing an ancestor, and its verdict (an instant).

    gepa 0.1.4 scores the merged program on a few validation examples (rollouts of phase
    merge_subsample, candidate `proposal`) and accepts it when its sum there reaches the
    higher of its parents'; accepted, it is validated in full and joins the pool as
    `candidate`. The merge takes the iteration's place: it makes no proposal.
    """

    iteration: int
    proposal: str  # "i-merge": the merged program's name in its rollouts
    parents: str  # "a,b": the two candidates merged, gepa's pool indices
    ancestor: str | None = None  # their common ancestor, when known
    accepted: bool
    candidate: str | None = None  # the new candidate's index when accepted
    score_before: float | None = None  # the higher of the parents' subsample sums
    score_after: float | None = None  # the merged program's subsample sum


# Why a task of an iteration ended without a proposal gepa judged (NoProposal.reason).
SKIPPED_REASONS = ("perfect_parent",)  # gepa skipped it: the parent was perfect on its minibatch
LOST_REASONS = (  # paid for (the parent's minibatch, perhaps a reflection), never judged
    "no_trajectories",  # the parent's evaluation returned no trajectories to reflect on
    "reflective_dataset",  # the adapter raised building the reflective dataset
    "reflection_failed",  # the reflection raised (LM error, unparsable reply, empty text)
    "no_texts",  # the reflection returned no new text
    "iteration_failed",  # an exception ended the iteration; gepa logged it and went on
)
BEFORE_REFLECTION = ("no_trajectories", "reflective_dataset")  # lost with no reflection run
MERGE_REASONS = ("merge_not_found",)  # a merge was due and gepa found no pair to merge
NO_PROPOSAL_REASONS = SKIPPED_REASONS + LOST_REASONS + MERGE_REASONS


@dataclass(frozen=True, kw_only=True)
class NoProposal(Event, kind="no_proposal"):
    """A task of an iteration that ended without a proposal gepa judged, and why (an instant).

    gepa logs these and goes on, so nothing else says what its parent minibatch and
    reflections bought. A merge due that found no pair is one too (`proposal` "i-merge").
    """

    iteration: int
    proposal: str  # the task's id "i-j", or "i-merge"
    parent: str | None = None  # gepa's index of the task's parent, when known
    reason: str  # one of NO_PROPOSAL_REASONS
    error: str | None = None  # the redacted one-line error, when one was raised


EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in Event.__subclasses__()}


def event_to_dict(event: Event) -> dict[str, Any]:
    return {"kind": event.kind, **asdict(event)}


def event_from_dict(data: Any) -> Event:
    """Build an event from a parsed line; raise ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kind = data.get("kind")
    cls = EVENT_TYPES.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    required = [
        f.name
        for f in fields(cls)
        if f.default is MISSING and f.default_factory is MISSING  # type: ignore[misc]
    ]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"{kind} event lacks field(s) {', '.join(missing)}")
    hints = _field_types(cls)
    for name, value in data.items():
        if name in hints and not _fits(value, hints[name]):
            raise ValueError(f"{kind} field {name} has a bad value {value!r}")
    event = cls(**{k: v for k, v in data.items() if k in hints})
    if event.end < event.start:
        raise ValueError(f"{kind} ends ({event.end}) before it starts ({event.start})")
    return event


@functools.cache
def _field_types(cls: type[Event]) -> dict[str, Any]:
    return {f.name: hint for f in fields(cls) if (hint := typing.get_type_hints(cls)[f.name])}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a parsed JSON value fits a field's declared type (the few the schema uses)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return any(_fits_one(value, typing.get_origin(option) or option) for option in options)


def _fits_one(value: Any, kind: type) -> bool:
    if kind is type(None):
        return value is None
    if isinstance(value, bool):  # JSON true/false: only a bool field takes it
        return kind is bool
    if kind is float:
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, kind)


class TraceWriter:
    """Appends events to a JSONL file, one flushed line each, from any thread."""

    def __init__(self, path: str | Path, *, append: bool = False):
        self.path = Path(path)
        self._file: TextIO = self.path.open("a" if append else "x", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        line = json.dumps(event_to_dict(event), allow_nan=False) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
