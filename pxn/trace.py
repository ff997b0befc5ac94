"""The one trace schema: what happened in a batched GEPA run, event by event.

The real runner and the simulator both write it, so one summary serves
measured and simulated runs, and "predicted vs measured" compares like with
like. A trace is JSON Lines: one event per line, each written and flushed as
it completes, so a crash leaves a valid prefix.

Every event has `start` and `end`, in seconds since the run started (an
instant, such as a decision, has start == end). The first line is always a
`run_start` carrying the schema version: 3 since proposals lost before gepa
judged them have their event, 2 since gepa's merge has its stage and its
event; a version 2 trace reads as 3 would (its lost proposals inferred from
its reflections) and a version 1 trace as 2 without merges.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import types
import typing
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TextIO

import numpy as np

from pxn.errors import PxnError
from pxn.shape import Shape

SCHEMA_VERSION = 3
# The versions this reader reads: 2 is 3 without no_proposal events, 1 is 2 without merges.
READABLE_VERSIONS = (1, 2, 3)

# Rollout phases, in the order gepa runs them: the seed's validation, then in an
# iteration either a merge's subsample (and, accepted, its full validation) or the
# proposals' minibatches (and the full validation of the children kept).
ROLLOUT_PHASES = ("seed_val", "merge_subsample", "parent_minibatch", "child_minibatch", "full_val")
# Stage names: the rollout phases plus the reflection stage between the minibatches.
STAGES = (
    "seed_val",
    "merge_subsample",
    "parent_minibatch",
    "reflection",
    "child_minibatch",
    "full_val",
)
# The stages only a run with gepa's merge on has.
MERGE_STAGES = ("merge_subsample",)


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str]
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, kw_only=True)
class RunStart(Event):
    """What was run: the shape, the budget and the pool. Always the first line."""

    kind: ClassVar[str] = "run_start"
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
class RunEnd(Event):
    kind: ClassVar[str] = "run_end"
    status: str  # "completed", "interrupted" or "failed"
    metric_calls: int
    iterations: int
    message: str = ""
    # The most timed rollouts seen in flight at once (a recorded run; 0 when none was
    # timed); run_start's workers when that was not declared (0 there).
    workers: int | None = None


@dataclass(frozen=True, kw_only=True)
class Iteration(Event):
    """One gepa iteration, numbered as gepa's callbacks number it (from 1)."""

    kind: ClassVar[str] = "iteration"
    iteration: int


@dataclass(frozen=True, kw_only=True)
class Stage(Event):
    """One stage between two barriers: a name from STAGES. Iteration 0 is the seed."""

    kind: ClassVar[str] = "stage"
    iteration: int
    name: str


@dataclass(frozen=True, kw_only=True)
class Rollout(Event):
    """One metric call: one candidate run on one example, by one of the W workers."""

    kind: ClassVar[str] = "rollout"
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
    # Where it ran when Ray ran it (`pxn run --eval-backend ray`): the Ray node id and
    # task id. `worker` stays the worker 0..W-1 on every backend.
    node: str | None = None
    task_id: str | None = None
    # False when nothing timed this rollout on its own (a recorded adapter that runs its
    # examples without reporting them): start and end are then those of the adapter call
    # that ran it, shared by that call's other untimed rollouts, and `worker` a lane, not
    # a worker. Such a call's span is the makespan of its rollouts on the W workers.
    timed: bool = True


@dataclass(frozen=True, kw_only=True)
class Reflection(Event):
    """One reflection LM call proposing a child of `parent`."""

    kind: ClassVar[str] = "reflection"
    iteration: int
    slot: int  # which of the C reflections in flight, 0..C-1
    proposal: str  # gepa's proposal id "i-j"
    parent: str
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    error: str | None = None
    attempts: int = 1
    # Whether the reply held a ``` pair. Without one gepa 0.1.4 takes the WHOLE reply
    # as the new text, chatter included; None when unknown (a simulation, a failed call).
    fenced: bool | None = None
    # The tokens of the prompt before its first character that differs from the previous
    # prompt recorded for the same parent by another job (an earlier iteration's, or an earlier
    # sibling's in job order; a job gepa asks again is not compared with itself): prefix
    # characters x tokens_in / prompt characters. A server that just served that prompt may
    # reuse this prefix. None for the parent's first job, or when the prompt or tokens_in is
    # unknown (a simulation, an LM the recorder cannot see).
    prefix_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class Attempt(Event):
    """One failed try of an LM call that was then retried or given up (the runner).

    The rollout or reflection event covers the whole call; its `attempts` counts
    these failed tries plus the last one.
    """

    kind: ClassVar[str] = "attempt"
    iteration: int
    call: str  # "rollout" or "reflection"
    phase: str  # the rollout phase, or "reflection"
    worker: int  # the rollout's worker (0..W-1), or the reflection's slot (0..C-1)
    attempt: int  # 1-based
    error: str  # redacted one-line message


@dataclass(frozen=True, kw_only=True)
class Resume(Event):
    """A resumed run continues here (`pxn run --resume`); times keep counting on.

    gepa resumes from the state saved at the top of iteration `iteration + 1`, so
    rollouts written before this event with a larger iteration number were lost
    work that gepa's metric-call count (`metric_calls` here, at resume) leaves out.
    """

    kind: ClassVar[str] = "resume"
    iteration: int  # gepa iterations completed in the saved state
    metric_calls: int  # gepa's metric-call count in the saved state


@dataclass(frozen=True, kw_only=True)
class Validation(Event):
    """A candidate's full-validation score as gepa recorded it (the runner; an instant).

    Iteration 0 is the seed. `candidate` is gepa's index in its pool.
    """

    kind: ClassVar[str] = "validation"
    iteration: int
    candidate: str
    score: float  # mean over the examples evaluated
    examples: int


@dataclass(frozen=True, kw_only=True)
class Budget(Event):
    """gepa's own metric-call count after an increment (the runner; an instant).

    gepa sends none for the seed validation, so the first one already includes it.
    """

    kind: ClassVar[str] = "budget"
    iteration: int
    metric_calls: int
    delta: int


@dataclass(frozen=True, kw_only=True)
class Decision(Event):
    """Whether a proposal beat its parent on the minibatch and joined the pool."""

    kind: ClassVar[str] = "decision"
    iteration: int
    proposal: str
    parent: str
    accepted: bool
    candidate: str | None = None  # the new candidate index when accepted
    score_before: float | None = None
    score_after: float | None = None


@dataclass(frozen=True, kw_only=True)
class Merge(Event):
    """gepa's merge of two candidates sharing an ancestor, and its verdict (an instant).

    gepa 0.1.4 scores the merged program on a few validation examples (its
    rollouts: phase merge_subsample, candidate `proposal`) and accepts it when
    its sum there reaches the higher of its parents' sums on the same examples
    (their scores known from their validation); accepted, it is validated in
    full and joins the pool as `candidate`. The merge takes the iteration's
    place: the iteration makes no proposal.
    """

    kind: ClassVar[str] = "merge"
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
class NoProposal(Event):
    """A task of an iteration that ended without a proposal gepa judged, and why (an instant).

    gepa logs these and goes on, so nothing else in a trace says what its parent
    minibatch and reflections bought. A merge that was due and found no pair is one
    too (`proposal` "i-merge"): the iteration then proposes as usual.
    """

    kind: ClassVar[str] = "no_proposal"
    iteration: int
    proposal: str  # the task's id "i-j", or "i-merge"
    parent: str | None = None  # gepa's index of the task's parent, when known
    reason: str  # one of NO_PROPOSAL_REASONS
    error: str | None = None  # the redacted one-line error, when one was raised


E = typing.TypeVar("E", bound=Event)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunStart,
        RunEnd,
        Iteration,
        Stage,
        Rollout,
        Reflection,
        Decision,
        Merge,
        NoProposal,
        Attempt,
        Resume,
        Validation,
        Budget,
    )
}


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
    for option in options:
        kind = typing.get_origin(option) or option
        if option is type(None):
            if value is None:
                return True
        elif isinstance(value, bool):  # JSON true/false: only a bool field takes it
            if kind is bool:
                return True
        elif kind is float:
            if isinstance(value, int | float) and math.isfinite(value):
                return True
        elif isinstance(value, kind):
            return True
    return False


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


@dataclass
class Trace:
    """The valid events of a trace file, and what had to be skipped."""

    path: Path
    events: list[Event]
    skipped: list[str] = field(default_factory=list)  # "line N: what was wrong"

    @functools.cached_property
    def run_start(self) -> RunStart:
        """The first event; a recorded run that did not declare W (workers 0) takes the most
        rollouts run_end saw in flight, or, cut short before its run_end, the most in flight
        among the rollouts it holds (what run_end would have said)."""
        start: RunStart = self.events[0]  # type: ignore[assignment]
        if start.workers:
            return start
        end = self.run_end
        seen = end.workers if end is not None else max_concurrency(self.of(Rollout))
        return replace(start, workers=seen) if seen else start

    @property
    def run_end(self) -> RunEnd | None:
        last = self.events[-1]
        return last if isinstance(last, RunEnd) else None

    def of(self, cls: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, cls)]

    def live(self, cls: type[E]) -> list[E]:
        """The events of `cls` in the run gepa finished, without those a resume threw away.

        A resumed run restarts from the state saved before iteration
        `resume.iteration + 1`; events written before the Resume for later
        iterations belong to work gepa then redid. Counting them would count a
        rollout or a proposal twice.
        """
        kept: list[E] = []
        for event in self.events:
            if isinstance(event, Resume):
                kept = [e for e in kept if getattr(e, "iteration", 0) <= event.iteration]
            elif isinstance(event, cls):
                kept.append(event)
        return kept


def max_concurrency(rollouts: Sequence[Rollout]) -> int:
    """The most timed rollouts in flight at once (an end at t frees its slot before a start at
    t). An untimed rollout spans its adapter call, as its call's others do: they overlap in
    the trace whether or not they ran at once, so they say nothing of W."""
    timed = [r for r in rollouts if r.timed]
    edges = sorted([(r.start, 1) for r in timed] + [(r.end, -1) for r in timed])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def read_trace(path: str | Path) -> Trace:
    """Read a trace, keeping every valid event.

    A truncated last line (a crash mid-write), an unknown event kind (a newer
    writer), a line lacking a field or holding a value of the wrong type is
    skipped and reported in `Trace.skipped` with its line number. A file that
    is not a trace of a version this reader reads, whose run_start is unusable, or
    that holds a second run after the first (two traces concatenated: read as
    one, its iterations would count twice) raises PxnError.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise PxnError(f"{path} is not a text file; is it a pxn trace (JSON lines)?") from None
    except OSError as exc:
        raise PxnError(f"cannot read trace {path}: {exc.strerror}") from None
    events: list[Event] = []
    skipped: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            what = "truncated last line" if number == len(lines) else "not valid JSON"
            skipped.append(f"line {number}: {what}")
            continue
        try:
            event = event_from_dict(data)
        except ValueError as exc:
            if not events:  # without its header a trace cannot be read at all
                _check_header(path, number, data)
                raise PxnError(f"{path} line {number}: {exc}") from None
            skipped.append(f"line {number}: {exc}")
            continue
        if not events:
            _check_header(path, number, data)
        elif isinstance(event, RunStart):
            raise PxnError(
                f"{path} line {number}: a second run_start: the file holds two runs one after "
                f"the other; split it there (head -n {number - 1} and tail -n +{number}) and "
                "give each run its own file"
            )
        events.append(event)
    if not events:
        raise PxnError(f"trace {path} holds no events")
    return Trace(path, events, skipped)


def _check_header(path: Path, number: int, data: Any) -> None:
    if not isinstance(data, dict) or data.get("kind") != "run_start":
        raise PxnError(
            f"{path} line {number}: a trace starts with a run_start event; is this a pxn trace?"
        )
    if data.get("schema") not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise PxnError(
            f"{path}: trace schema version {data.get('schema')!r}, this pxn reads versions "
            f"{readable}; use the gepa-pxn release that wrote it"
        )


# ---- finding and reading the traces a person points at ----
#
# A run directory is `runs/NAME/` holding `trace.jsonl`. Unusable traces (not a
# pxn trace, a schema version this pxn does not read, no run_start, two runs in one file, no
# rollouts) are set aside with a one-line reason when others remain; reading
# nothing usable, or a run given twice, is a PxnError. Lines `read_trace`
# skipped are kept, with their line numbers, for the report.

TRACE_NAME = "trace.jsonl"


def trace_path(path: str | Path) -> Path:
    """The trace file of a run directory, or the path itself when it is a file."""
    path = Path(path)
    if path.is_dir():
        inside = path / TRACE_NAME
        if not inside.is_file():
            raise PxnError(f"{path} is a directory without a {TRACE_NAME}; is it a run directory?")
        return inside
    if not path.exists():
        raise PxnError(f"{path}: no such run directory or trace file")
    return path


def read_one(path: str | Path) -> Trace:
    """Read one trace (a file or a run directory); PxnError naming the problem if unusable."""
    return read_trace(trace_path(path))


@dataclass
class Loaded:
    """The traces calibration can use, and what was set aside and why."""

    traces: list[Trace]
    rejected: list[str] = field(default_factory=list)  # "path: reason", one per trace

    @property
    def skipped_lines(self) -> list[str]:
        return [f"{t.path} {line}" for t in self.traces for line in t.skipped]


def load_traces(paths: Sequence[str | Path], *, need_rollouts: bool = True) -> Loaded:
    """Read every path; keep the usable traces, fail only when none is usable."""
    if not paths:
        raise PxnError("give at least one trace file or run directory")
    traces: list[Trace] = []
    rejected: list[str] = []
    for path in paths:
        try:
            trace = read_one(path)
        except PxnError as exc:
            rejected.append(str(exc))
            continue
        if need_rollouts and not trace.of(Rollout):
            rejected.append(f"{trace.path}: holds no rollout events")
            continue
        refuse_a_second_copy(trace, traces)
        traces.append(trace)
    if not traces:
        if len(rejected) == 1:
            raise PxnError(rejected[0])
        raise PxnError(f"none of the {len(rejected)} traces is usable; first: {rejected[0]}")
    return Loaded(traces, rejected)


def refuse_a_second_copy(trace: Trace, earlier: list[Trace]) -> None:
    """Refuse a run given twice: the same file, or a copy holding the same events.

    Counted twice, a run would weigh double in every fit. Two runs never hold
    the same events (a real run's run_start has the time it started, and its
    latencies differ; a simulated one's has its replicate); a copy edited
    since (a test set scored later, say) is another run.
    """
    for other in earlier:
        if other.path.resolve() == trace.path.resolve():
            which = (
                f"{trace.path} is given twice"
                if other.path == trace.path
                else f"{other.path} and {trace.path} are the same file"
            )
            raise PxnError(f"{which}: give each run once")
        if other.events == trace.events:
            raise PxnError(
                f"{other.path} and {trace.path} hold the same run (the same events, one for "
                "one): give each run once"
            )


@dataclass(frozen=True)
class SearchFigures:
    """What a run's scores say about its search, beyond its best score (NaN: not seen).

    val_gain: the mean of a new candidate's mean validation score less its parent's;
    example_spread: the sd, over validation examples, of each example's mean score over
    the candidates validated (how much examples differ in difficulty); repeat_agreement:
    the share of a parent's repeated evaluations on one train example that scored as the
    one before (how noisy an evaluation is).
    """

    val_gain: float
    example_spread: float
    repeat_agreement: float


def example_spread(scores: Sequence[Sequence[float]]) -> float:
    """The sd over examples of their mean score over candidates (a row per candidate)."""
    if len(scores) < 1 or not len(scores[0]):
        return math.nan
    return float(np.std(np.mean(np.vstack(scores), axis=0)))


class Repeats:
    """Counts a parent's repeated evaluations on one example, and those that agreed."""

    def __init__(self) -> None:
        self.last: dict[tuple[Hashable, Hashable], float] = {}
        self.repeated = 0
        self.agreed = 0

    def add(self, candidate: Hashable, example: Hashable, score: float) -> None:
        before = self.last.get((candidate, example))
        if before is not None:
            self.repeated += 1
            self.agreed += before == score
        self.last[candidate, example] = score

    @property
    def agreement(self) -> float:
        return self.agreed / self.repeated if self.repeated else math.nan


@dataclass(frozen=True)
class RunSummary:
    """The figures of one run, measured or simulated."""

    wall_clock: float  # seconds
    iterations: int
    full_val_iterations: int  # iterations that ran full validation
    proposals: int
    accepted: int
    metric_calls: int
    stage_time: dict[str, float]  # seconds per stage name, plus "overhead"
    utilisation: float  # busy worker-seconds / (W * wall-clock)
    dollars: float | None = None  # what the calls cost; None when nothing priced them
    throttled_calls: int = 0  # calls that waited for rate-limit capacity (simulated)
    skipped: int = 0  # proposals not made: their parent was perfect on the minibatch
    # Tasks lost after their parent's minibatch, before gepa judged a proposal (a failed
    # reflection, no reflective dataset: pxn.failures), and the iterations (merges aside)
    # that judged no proposal at all.
    failed: int = 0
    no_proposal_iterations: int = 0
    # gepa's merges (use_merge): attempted (each an iteration without proposals),
    # and accepted (each a new candidate besides `accepted`).
    merges: int = 0
    merges_accepted: int = 0
    # The search, where scores are known (a recorded run; the quality model): the
    # seed's and the best mean validation score, the chosen candidate's expected score
    # on fresh examples (simulated only), (seconds, best validation score) each time it
    # rose, and what the quality model is calibrated from (SearchFigures).
    seed_score: float | None = None
    best_score: float | None = None
    test_score: float | None = None
    progress: tuple[tuple[float, float], ...] = ()
    figures: SearchFigures | None = None

    @property
    def full_val_share(self) -> float:
        return self.full_val_iterations / self.iterations if self.iterations else math.nan

    @property
    def acceptance(self) -> float:
        """The share of proposals that joined the pool."""
        return self.accepted / self.proposals if self.proposals else math.nan

    @property
    def skip_share(self) -> float:
        """The share of tasks skipped because their parent was perfect on the minibatch."""
        tasks = self.skipped + self.proposals
        return self.skipped / tasks if tasks else math.nan

    @property
    def failed_share(self) -> float:
        """The share of tasks gepa did not skip that were lost before it judged them."""
        tasks = self.failed + self.proposals
        return self.failed / tasks if tasks else math.nan

    @property
    def no_proposal_share(self) -> float:
        """The share of iterations that judged no proposal (merges count as proposals)."""
        return self.no_proposal_iterations / self.iterations if self.iterations else math.nan

    @property
    def val_gain(self) -> float:
        return math.nan if self.figures is None else self.figures.val_gain

    @property
    def example_spread(self) -> float:
        return math.nan if self.figures is None else self.figures.example_spread

    @property
    def repeat_agreement(self) -> float:
        return math.nan if self.figures is None else self.figures.repeat_agreement


def summarize(trace: Trace) -> RunSummary:
    """Summarize a trace the same way whether it was measured or simulated."""
    end = trace.run_end
    wall_clock = end.end if end else max(e.end for e in trace.events)
    stages = trace.live(Stage)
    stage_time = {name: 0.0 for name in STAGES}
    for stage in stages:
        stage_time[stage.name] += stage.duration
    stage_time["overhead"] = wall_clock - sum(stage_time.values())
    decisions = trace.live(Decision)
    merges = trace.live(Merge)
    rollouts = trace.live(Rollout)
    busy = sum(r.duration for r in rollouts)
    costs = [c.cost for c in (*rollouts, *trace.live(Reflection)) if c.cost is not None]
    workers = trace.run_start.workers
    phases_per_iteration = Counter(s.iteration for s in stages if s.name == "full_val")
    validations = trace.live(Validation)
    progress = best_score_progress(validations)
    iterations = trace.live(Iteration)
    lost = LostTasks.of(trace, iterations, decisions, merges)
    return RunSummary(
        wall_clock=wall_clock,
        iterations=len(iterations),
        full_val_iterations=len(phases_per_iteration),
        proposals=len(decisions),
        accepted=sum(d.accepted for d in decisions),
        metric_calls=len(rollouts),
        stage_time=stage_time,
        utilisation=busy / (workers * wall_clock) if workers and wall_clock > 0 else 0.0,
        dollars=sum(costs) if costs else None,
        skipped=lost.skipped,
        failed=lost.failed,
        no_proposal_iterations=lost.no_proposal_iterations,
        merges=len(merges),
        merges_accepted=sum(m.accepted for m in merges),
        seed_score=next((v.score for v in validations if v.iteration == 0), None),
        best_score=progress[-1][1] if progress else None,
        progress=progress,
        figures=search_figures(validations, decisions, rollouts) if progress else None,
    )


@dataclass(frozen=True)
class LostTasks:
    """A run's tasks that gepa judged no proposal of: skipped, or lost (pxn.failures)."""

    skipped: int
    failed: int
    no_proposal_iterations: int

    @classmethod
    def of(
        cls,
        trace: Trace,
        iterations: list[Iteration],
        decisions: list[Decision],
        merges: list[Merge],
    ) -> LostTasks:
        """From the no_proposal events (schema 3); an older trace's lost tasks are those that
        reached a reflection and no decision, the rest of its k tasks an iteration skipped."""
        # A merge takes its iteration's place: that iteration proposes nothing.
        reflective = {i.iteration for i in iterations} - {m.iteration for m in merges}
        idle = len(reflective - {d.iteration for d in decisions})
        if trace.run_start.schema >= 3:
            reasons = Counter(e.reason for e in trace.live(NoProposal) if e.iteration in reflective)
            return cls(
                skipped=sum(reasons[r] for r in SKIPPED_REASONS),
                failed=sum(reasons[r] for r in LOST_REASONS),
                no_proposal_iterations=idle,
            )
        decided = {(d.iteration, d.proposal) for d in decisions}
        reflected = {(r.iteration, r.proposal) for r in trace.live(Reflection)}
        failed = len({task for task in reflected - decided if task[0] in reflective})
        k = Shape.parse(trace.run_start.shape).k
        skipped = max(0, k * len(reflective) - len(decisions) - failed)
        return cls(skipped=skipped, failed=failed, no_proposal_iterations=idle)


def search_figures(
    validations: list[Validation], decisions: list[Decision], rollouts: list[Rollout]
) -> SearchFigures:
    """A recorded run's SearchFigures, from its validations, decisions and scored rollouts."""
    val_of = {v.candidate: v.score for v in validations}
    gains = [
        val_of[d.candidate] - val_of[d.parent]
        for d in decisions
        if d.accepted and d.candidate in val_of and d.parent in val_of
    ]
    by_candidate: dict[str, dict[str, float]] = {}
    repeats = Repeats()
    for r in rollouts:
        if r.score is None:
            continue
        if r.phase in ("seed_val", "full_val"):
            by_candidate.setdefault(r.candidate, {})[r.example] = r.score
        elif r.phase == "parent_minibatch":
            repeats.add(r.candidate, r.example, r.score)
    examples = sorted(set.intersection(*map(set, by_candidate.values()))) if by_candidate else []
    return SearchFigures(
        val_gain=sum(gains) / len(gains) if gains else math.nan,
        example_spread=example_spread([[v[e] for e in examples] for v in by_candidate.values()]),
        repeat_agreement=repeats.agreement,
    )


def best_score_progress(validations: Sequence[Validation]) -> tuple[tuple[float, float], ...]:
    """(time, best mean validation score so far) at each validation that raised it."""
    progress: list[tuple[float, float]] = []
    for event in sorted(validations, key=lambda e: e.end):
        if not progress or event.score > progress[-1][1]:
            progress.append((event.end, event.score))
    return tuple(progress)
