"""The traces cut into units, one per (run, iteration): the data every fit reads.

A unit holds its iteration's calls (each with the load it started under), its
verdicts, the gaps before its stages (gepa's own work), its tasks (how
many reached a reflection) and its merge (judged, accepted): an iteration a
merge took has no tasks. Iteration 0 (the seed's validation) is a unit too.
The point estimate fits all units; the parameter bootstrap (draws.py)
resamples them, so one function computes both.

Calls. A call's load counts the calls of its own model (rollouts, or
reflections) in flight at its start (overhead.call_loads): a model's load
never meets the other's, as gepa's barriers keep its stages apart. A call
that the runner retried after a try was cut at a timeout is not a latency:
its tries that timed out enter as right-censored observations (the latency
was longer than the try) and its last try, whose start the trace does not
record, is left out. Tries are independent draws, so leaving it out biases
nothing. An untimed rollout (trace.Rollout.timed) is no call here: its
duration is its adapter call's span. Each such call is a row of the unit's
spans instead, its span a makespan (makespan.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from pxn.calibrate.traces.acceptance_likelihood import Steps
from pxn.calibrate.traces.bookkeeping import Parents, dropped_after_passing
from pxn.calibrate.traces.failures import COUNTS, iteration_counts, reflective_iterations
from pxn.calibrate.traces.makespan import Spans, untimed_calls
from pxn.calibrate.traces.overhead import call_loads, loop_end
from pxn.selection import Selection
from pxn.shape import Shape
from pxn.trace import Attempt, Decision, Merge, Reflection, Rollout, Stage
from pxn.trace_reading import Trace

TIMEOUT = re.compile(r"time[d ]?out", re.IGNORECASE)
MATCH = 1e-6  # seconds: clock rounding between a call and its tries


@dataclass(frozen=True)
class Calls:
    """LM calls (and timed-out tries), one row each."""

    kind: np.ndarray  # "rollout" or "reflection"
    phase: np.ndarray  # the rollout's phase, or "reflection"
    load: np.ndarray  # calls of its model in flight at its start, itself included
    latency: np.ndarray  # seconds
    minibatch: np.ndarray  # its run's b
    censored: np.ndarray  # a try cut at a timeout: the latency was longer
    event: np.ndarray  # the Rollout or Reflection event
    tokens_in: np.ndarray  # nan where the call reports none
    tokens_out: np.ndarray
    run: np.ndarray  # the run it is from (in a resample: the drawn copy of a run)
    # Seconds it may have waited, were its model one server serving calls one at a time:
    # from its start to the end of the call of its model that ended last before it (0 for
    # a try cut at a timeout). served_alone takes it off when every call waited for the one
    # server.
    wait: np.ndarray

    def of(self, kind: str, phase: str | None = None) -> np.ndarray:
        """Rows of this kind (and phase)."""
        rows = self.kind == kind
        return rows if phase is None else rows & (self.phase == phase)

    def take(self, rows: np.ndarray) -> Calls:
        return Calls(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))


@dataclass(frozen=True)
class Units:
    run: np.ndarray  # per unit: which run (trace) it is from; in a resample, which drawn copy
    design: tuple[str, ...]  # per run: its setup (shape, W, C, b, servers), see run_design
    calls: Calls
    call_unit: np.ndarray
    spans: Spans  # the untimed adapter calls, each with its run's W
    span_unit: np.ndarray
    spans_set_aside: int  # untimed calls that raised or shared their span with timed ones
    steps: Steps
    parents: Parents
    later: np.ndarray  # per iteration: selected children after the first (selection 'all')
    dropped: np.ndarray  # per iteration: children dropped as a sibling's duplicate
    step_unit: np.ndarray
    gap: np.ndarray  # per unit: seconds of gepa's own work before its stages
    stages: np.ndarray  # per unit
    tasks: np.ndarray  # per unit: tasks of a completed iteration
    reflected: np.ndarray  # per unit: of those, tasks that reached a reflection
    losses: np.ndarray  # per unit, a row: failures.COUNTS (proposals lost before gepa judged)
    merges: np.ndarray  # per unit: merges gepa judged (0 or 1)
    merges_accepted: np.ndarray  # per unit: of those, accepted
    retries: dict[str, tuple[int, ...]]  # per kind, per call retried after a timeout:
    # the retries it made and then finished (fit.detect_cap)
    duplicates_shown: bool
    duplicates_why_not: str
    passes_hidden: bool  # a run with a selection limit and no scores: passes not all seen

    @property
    def unskipped(self) -> np.ndarray:
        """Per unit: the tasks gepa did not skip (they reached a reflection, or were lost
        before it)."""
        return self.reflected + self.losses[:, COUNTS.index("dataset_lost")]

    @property
    def runs(self) -> int:
        return int(self.run.max()) + 1 if len(self.run) else 0

    def resample(self, rng: np.random.Generator) -> Units:
        """Runs drawn with replacement within each design, then units within each drawn run.

        Stratified by design, every draw keeps the loads, shapes and W the calibration saw:
        resampling across designs could draw, say, only the W = 2 runs, where every rollout
        ran at load 2 and every reflection at load 1, and a slowdown fitted there is noise.
        A design with one run only varies its units. Each drawn copy of a run is a run of
        its own (numbered in the order drawn), as a new run in the same conditions would be.
        """
        by_run = [np.flatnonzero(self.run == r) for r in range(self.runs)]
        drawn_runs = []
        for design in dict.fromkeys(self.design):
            runs = [r for r in range(self.runs) if self.design[r] == design]
            drawn_runs.extend(rng.choice(runs, size=len(runs)) if len(runs) > 1 else runs)
        chosen = np.concatenate([rng.choice(by_run[r], size=len(by_run[r])) for r in drawn_runs])
        drawn = self.take(chosen)
        copy = np.repeat(np.arange(len(drawn_runs)), [len(by_run[r]) for r in drawn_runs])
        return dataclasses.replace(
            drawn,
            run=copy,
            design=tuple(self.design[r] for r in drawn_runs),
            calls=dataclasses.replace(drawn.calls, run=copy[drawn.call_unit]),
        )

    def take(self, chosen: np.ndarray) -> Units:
        call_rows, call_unit = _rows(self.call_unit, chosen, len(self.run))
        span_rows, span_unit = _rows(self.span_unit, chosen, len(self.run))
        step_rows, step_unit = _rows(self.step_unit, chosen, len(self.run))
        return dataclasses.replace(
            self,
            **{name: getattr(self, name)[chosen] for name in PER_UNIT},
            calls=self.calls.take(call_rows),
            call_unit=call_unit,
            spans=self.spans.take(span_rows),
            span_unit=span_unit,
            steps=self.steps.take(step_rows),
            parents=self.parents.take(step_rows),
            later=self.later[step_rows],
            dropped=self.dropped[step_rows],
            step_unit=step_unit,
        )


# The fields of Units with a value per unit; the others are per row or fixed.
PER_UNIT = ("run", "gap", "stages", "tasks", "reflected", "losses", "merges", "merges_accepted")


def _rows(unit_of_row: np.ndarray, chosen: np.ndarray, units: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the chosen units, unit by unit, a unit's rows as often as it was chosen;
    and each such row's unit, numbered as the units are chosen."""
    order = np.argsort(unit_of_row, kind="stable")
    counts = np.bincount(unit_of_row, minlength=units)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    lengths = counts[chosen]
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    rows = order[np.repeat(starts[chosen], lengths) + offsets]
    return rows, np.repeat(np.arange(len(chosen)), lengths)


class _Builder:
    """Collects the rows of every trace, numbering units as it meets them."""

    def __init__(self) -> None:
        self.unit_of: dict[tuple[int, int], int] = {}
        self.unit_run: list[int] = []
        # Per table ("calls", "spans", "steps"): its columns, and each row's unit.
        self.tables: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.row_unit: dict[str, list[int]] = defaultdict(list)
        self.spans_set_aside = 0
        self.per_unit: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.retries: dict[str, list[int]] = defaultdict(list)

    def unit(self, run: int, iteration: int) -> int:
        key = (run, iteration)
        if key not in self.unit_of:
            self.unit_of[key] = len(self.unit_run)
            self.unit_run.append(run)
        return self.unit_of[key]

    def row(self, table: str, run: int, iteration: int, /, **columns) -> None:
        for name, value in columns.items():
            self.tables[table][name].append(value)
        self.row_unit[table].append(self.unit(run, iteration))

    def unit_of_rows(self, table: str) -> np.ndarray:
        return np.array(self.row_unit[table], dtype=int)

    def add(self, name: str, run: int, iteration: int, value: float) -> None:
        self.per_unit[name][self.unit(run, iteration)] += value

    def dense(self, name: str) -> np.ndarray:
        values = np.zeros(len(self.unit_run))
        for unit, value in self.per_unit[name].items():
            values[unit] = value
        return values


def cut_into_units(traces: list[Trace]) -> Units:
    builder = _Builder()
    for run, trace in enumerate(traces):
        _calls(builder, run, trace)
        _spans(builder, run, trace)
        _steps(builder, run, trace)
        _stages(builder, run, trace)
        _tasks(builder, run, trace)
        _losses(builder, run, trace)
        _merges(builder, run, trace)
    calls, spans, steps = (builder.tables[t] for t in ("calls", "spans", "steps"))
    scored = [_scored(t) for t in traces]
    unlimited = [selection_of(t).limit is None for t in traces]
    shown = any(s and u for s, u in zip(scored, unlimited, strict=True))
    why_not = (
        ""
        if shown
        else "the decisions record no minibatch scores"
        if not any(scored)
        else "every run had a selection limit, which may have dropped a passed child too"
    )
    return Units(
        run=np.array(builder.unit_run, dtype=int),
        design=tuple(run_design(t) for t in traces),
        calls=Calls(
            kind=np.array(calls["kind"], dtype=str),
            phase=np.array(calls["phase"], dtype=str),
            load=np.array(calls["load"], dtype=float),
            latency=np.array(calls["latency"], dtype=float),
            minibatch=np.array(calls["minibatch"], dtype=int),
            censored=np.array(calls["censored"], dtype=bool),
            event=_objects(calls["event"]),
            tokens_in=_counts(calls["event"], "tokens_in"),
            tokens_out=_counts(calls["event"], "tokens_out"),
            run=np.array(calls["run"], dtype=int),
            wait=np.array(calls["wait"], dtype=float),
        ),
        call_unit=builder.unit_of_rows("calls"),
        spans=Spans(
            span=np.array(spans["span"], dtype=float),
            size=np.array(spans["size"], dtype=int),
            workers=np.array(spans["workers"], dtype=int),
        ),
        span_unit=builder.unit_of_rows("spans"),
        spans_set_aside=builder.spans_set_aside,
        steps=Steps.of(steps["made"], steps["judged"], steps["passed"], steps["batched"]),
        parents=Parents(*(np.array(steps[f], dtype=float) for f in Parents.__dataclass_fields__)),
        later=np.array(steps["later"], dtype=float),
        dropped=np.array(steps["dropped"], dtype=float),
        step_unit=builder.unit_of_rows("steps"),
        gap=builder.dense("gap"),
        stages=builder.dense("stages"),
        tasks=builder.dense("tasks"),
        reflected=builder.dense("reflected"),
        losses=np.column_stack([builder.dense(name) for name in COUNTS]),
        merges=builder.dense("merges"),
        merges_accepted=builder.dense("merges_accepted"),
        retries={kind: tuple(v) for kind, v in builder.retries.items()},
        duplicates_shown=shown,
        passes_hidden=any(not s and not u for s, u in zip(scored, unlimited, strict=True)),
        duplicates_why_not=why_not,
    )


def run_design(trace: Trace) -> str:
    """What a run's setup fixed, as the bootstrap's stratum."""
    start = trace.run_start
    return (
        f"{start.shape} W={start.workers} C={start.reflection_concurrency} b={start.minibatch} "
        f"servers={start.meta.get('lm_servers')}"
    )


def _counts(events: list, name: str) -> np.ndarray:
    values = [getattr(e, name) for e in events]
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _objects(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def selection_of(trace: Trace) -> Selection:
    """The selection strategy the run used, as its run_start records it ('all' if not)."""
    meta = trace.run_start.meta
    selection = meta.get("selection") or meta.get("scenario", {}).get("selection") or "all"
    return Selection.parse(str(selection))


def _calls(builder: _Builder, run: int, trace: Trace) -> None:
    b = trace.run_start.minibatch
    timed_out = _timed_out_tries(trace)
    rollouts = [r for r in trace.of(Rollout) if r.timed]
    for kind, events in (("rollout", rollouts), ("reflection", trace.of(Reflection))):
        loads = call_loads(events)
        waits = one_server_waits(events)
        for event, load, wait in zip(events, loads.tolist(), waits.tolist(), strict=True):
            phase = event.phase if isinstance(event, Rollout) else "reflection"
            tries = timed_out.get(_call_key(kind, event), [])
            # The same slot runs the next call the instant this one ends: a try is
            # this call's when it starts before the end and ends by it.
            tries = [
                t
                for t in tries
                if event.start - MATCH <= t.start < event.end - MATCH and t.end <= event.end + MATCH
            ]
            if tries:  # a call whose every try timed out shows the client's retries exactly
                finished = len(tries) < event.attempts
                builder.retries[kind].append(len(tries) if finished else len(tries) - 1)
            row = {"kind": kind, "phase": phase, "load": load, "minibatch": b, "event": event}
            observed = [(t.duration, True, 0.0) for t in tries] or [(event.duration, False, wait)]
            for latency, censored, waited in observed:
                row |= {"run": run, "latency": latency, "censored": censored, "wait": waited}
                builder.row("calls", run, event.iteration, **row)


def one_server_waits(calls: list[Rollout] | list[Reflection]) -> np.ndarray:
    """Each call's wait, were its model one server: a server serving calls one at a time
    began on a call at its start or at the end of the call it served before, which is the
    call that ended last before it, whichever is later."""
    if not calls:
        return np.empty(0)
    starts = np.array([c.start for c in calls])
    ends = np.array([c.end for c in calls])
    ordered = np.sort(ends)
    before = np.searchsorted(ordered, ends, side="left") - 1  # the last end strictly before
    previous = np.where(before >= 0, ordered[np.maximum(before, 0)], -np.inf)
    return np.clip(previous - starts, 0.0, ends - starts)


def _spans(builder: _Builder, run: int, trace: Trace) -> None:
    calls, set_aside = untimed_calls(trace)
    workers = trace.run_start.workers
    for call in calls:
        builder.row("spans", run, call.iteration, span=call.span, size=call.size, workers=workers)
    builder.spans_set_aside += set_aside


def _call_key(kind: str, event: Rollout | Reflection) -> tuple:
    slot = event.worker if isinstance(event, Rollout) else event.slot
    phase = event.phase if isinstance(event, Rollout) else "reflection"
    return (kind, event.iteration, phase, slot)


def _timed_out_tries(trace: Trace) -> dict[tuple, list[Attempt]]:
    tries: dict[tuple, list[Attempt]] = defaultdict(list)
    for attempt in trace.of(Attempt):
        if TIMEOUT.search(attempt.error):
            tries[(attempt.call, attempt.iteration, attempt.phase, attempt.worker)].append(attempt)
    return tries


def _scored(trace: Trace) -> bool:
    return any(
        d.score_before is not None and d.score_after is not None for d in trace.live(Decision)
    )


def _steps(builder: _Builder, run: int, trace: Trace) -> None:
    """Per judged iteration: the proposals made before it, judged, passed, and its parents
    (with those drawn before it from the same front: since the last acceptance).

    A child passed its judge when it was accepted, or when its scores show it beat
    its parent though gepa did not keep it: dropped by the selection's limit or as
    a sibling's duplicate. Without a limit only a duplicate is dropped.
    """
    by_iteration: dict[int, list[Decision]] = defaultdict(list)
    for decision in trace.live(Decision):
        by_iteration[decision.iteration].append(decision)
    parents = _parents(trace)
    unlimited = selection_of(trace).limit is None
    batched = Shape.parse(trace.run_start.shape).k > 1
    merged = sorted(m.iteration for m in trace.live(Merge) if m.accepted)  # joined the pool too
    made = added_before = 0
    front: list[str] = []  # parents drawn from the current front, since the last acceptance
    for iteration in sorted(by_iteration):
        if merged and merged[0] < iteration:  # a merge joined since: a new front
            joined = sum(m < iteration for m in merged)
            added_before += joined
            merged = merged[joined:]
            front = []
        decisions = by_iteration[iteration]
        accepted = sum(d.accepted for d in decisions)
        dropped = sum(dropped_after_passing(d) for d in decisions)
        drawn = parents.get(iteration, [])
        rows = builder.tables["steps"]
        rows["made"].append(made)
        rows["judged"].append(len(decisions))
        rows["passed"].append(accepted + dropped)
        rows["batched"].append(batched)
        # gepa drops a child as the duplicate of a sibling it keeps, and the kept one joins
        # the pool after full validation: an iteration that accepted none was cut short
        # (Ctrl-C, an error) before its verdicts, and its passed children show no duplicate.
        shows_duplicates = unlimited and accepted > 0
        rows["later"].append(max(accepted + dropped - 1, 0) if shows_duplicates else 0)
        rows["dropped"].append(dropped if shows_duplicates else 0)
        rows["candidates"].append(1 + added_before)
        rows["drawn_before"].append(len(front))
        rows["distinct_before"].append(len(set(front)))
        front += drawn
        rows["drawn"].append(len(front))
        rows["distinct"].append(len(set(front)))
        builder.row_unit["steps"].append(builder.unit(run, iteration))
        made += len(decisions)
        added_before += accepted
        if accepted:  # a child joined the pool: the next iteration draws from a new front
            front = []


def _parents(trace: Trace) -> dict[int, list[str]]:
    """Per iteration, the parent of each group of N tasks that reached a reflection."""
    n = Shape.parse(trace.run_start.shape).n
    groups: dict[int, dict[int, str]] = defaultdict(dict)
    for reflection in trace.live(Reflection):
        _, _, task = reflection.proposal.partition("-")
        if task.isdigit():
            groups[reflection.iteration][int(task) // n] = reflection.parent
    return {iteration: list(by_group.values()) for iteration, by_group in groups.items()}


def _stages(builder: _Builder, run: int, trace: Trace) -> None:
    """The gap before each stage goes to its iteration; the loop's tail to the last."""
    stages = sorted(trace.of(Stage), key=lambda s: s.start)
    previous = 0.0
    for stage in stages:
        builder.add("gap", run, stage.iteration, max(0.0, stage.start - previous))
        builder.add("stages", run, stage.iteration, 1)
        previous = stage.end
    if stages:
        builder.add("gap", run, stages[-1].iteration, max(0.0, loop_end(trace) - previous))


def _tasks(builder: _Builder, run: int, trace: Trace) -> None:
    """Tasks of completed iterations, and those that reached a reflection (gepa skips the
    task of a parent that scored perfectly on its minibatch). A task is counted once
    however often its reflection ran: gepa asks again for every task of an iteration after a
    failed reflection, and the retry carries the task's proposal id again."""
    k = Shape.parse(trace.run_start.shape).k
    done = reflective_iterations(trace)
    for iteration in done:
        builder.add("tasks", run, iteration, k)
    reached = {(r.iteration, r.proposal) for r in trace.live(Reflection) if r.iteration in done}
    for iteration, _ in reached:
        builder.add("reflected", run, iteration, 1)


def _losses(builder: _Builder, run: int, trace: Trace) -> None:
    """Each iteration's counts of proposals lost before gepa judged them (failures.py)."""
    for iteration, counts in iteration_counts(trace).items():
        for name, value in zip(COUNTS, counts.tolist(), strict=True):
            builder.add(name, run, iteration, value)


def _merges(builder: _Builder, run: int, trace: Trace) -> None:
    """Each merge gepa judged, and whether it accepted it."""
    for merge in trace.live(Merge):
        builder.add("merges", run, merge.iteration, 1)
        builder.add("merges_accepted", run, merge.iteration, merge.accepted)
