"""What every fit of a calibration reads, gathered once: the traces, their units, the notes.

gather_evidence loads the traces, reads what they declare (whether their setups agree, the
LM pool's size), refuses in one line traces no scenario can come from (no reflection, no
judged proposal: a run that failed, was interrupted or was cut short too early, or whose
budget covered only the seed's validation; the line says how each run ended) and prices
they cannot support (no token counts), notes failed rollouts, and cuts the traces into
units (units.py). The fitted parts (parts.py) then add their notes to its list, in the
order they run: the report prints them so.

The runs' setup is read, not fitted. Budget, data sizes, b, W and C come from run_start
(the first trace's where they differ, with a note); lm_servers as given, else the
smallest the meta declares. A run stopped by its own callbacks declares budget 0: B is
then the most metric calls a run made. Also: how each run ended, how the workers served
a stage's candidates (dspy.GEPA splits them), the optimizer, and [calibrated_on].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pxn.calibrate.traces.tokens import missing_token_counts
from pxn.calibrate.traces.units import Units, cut_into_units
from pxn.errors import PxnError
from pxn.run_summary import summarize
from pxn.scenario import CalibratedOn
from pxn.trace import Decision, Reflection, Rollout
from pxn.trace_reading import Loaded, Trace, load_traces


@dataclass(frozen=True)
class Evidence:
    loaded: Loaded
    units: Units
    rollouts: list[Rollout]
    reflections: list[Reflection]
    lm_servers: int | None
    lm_servers_source: str  # where lm_servers came from ("" when unknown)
    tokens_missing: list[str]  # the counts no call reports, e.g. "reflection tokens_in"
    notes: list[str]  # what the report says beside the fits, in the order found

    @property
    def traces(self) -> list[Trace]:
        return self.loaded.traces


def gather_evidence(
    paths: Sequence[str | Path], lm_servers: int | None, *, priced: bool
) -> Evidence:
    """`lm_servers`: the pool's size when given (it overrides the traces'); `priced`:
    whether a [prices] table is to be written (it needs every token count)."""
    loaded = load_traces(paths)
    traces = loaded.traces
    notes = setup_notes(traces)
    servers, source = lm_servers_of(traces, lm_servers, notes)
    rollouts = [r for t in traces for r in t.of(Rollout)]
    reflections = [r for t in traces for r in t.of(Reflection)]
    if not reflections:
        raise PxnError(
            "no reflection events in the traces: the reflection latency cannot be "
            f"calibrated ({runs_ended(traces)}); run until at least one iteration completes"
        )
    if not any(t.live(Decision) for t in traces):
        errors = [r.error for r in reflections if r.error]
        failed = ""
        if len(errors) == len(reflections):
            failed = f"; all {len(errors)} reflection(s) failed (last: {errors[-1]})"
        hint = (
            "give the reflection LM room to write a usable reply (a larger model or max_tokens), "
            "or run until one proposal is judged"
            if failed
            else "run until at least one iteration completes"
        )
        raise PxnError(
            "no judged proposals (decision events) in the traces: acceptance cannot be "
            f"calibrated ({runs_ended(traces)}{failed}); {hint}"
        )
    if failed := [r for r in rollouts if r.error]:
        notes.append(
            f"{len(failed)} of {len(rollouts)} rollouts failed (first: {failed[0].error}); "
            "their latencies are fitted with the others'"
        )
    missing_tokens = missing_token_counts(rollouts, reflections)
    if priced and missing_tokens:
        raise PxnError(
            f"prices tokens, but no call in the traces reports its "
            f"{', '.join(missing_tokens)}; calibrate without it, or from traces with token counts",
            subject="task model",
        )
    units = cut_into_units(traces)
    return Evidence(loaded, units, rollouts, reflections, servers, source, missing_tokens, notes)


SETUP_FIELDS = (
    "budget",
    "valset_size",
    "trainset_size",
    "minibatch",
    "workers",
    "reflection_concurrency",
)


def setup_notes(traces: list[Trace]) -> list[str]:
    """Say so when the traces were not all run with the same setup."""
    notes = []
    first = traces[0].run_start
    for name in SETUP_FIELDS:
        values = sorted({getattr(t.run_start, name) for t in traces})
        if len(values) > 1:
            notes.append(
                f"traces differ in {name} ({', '.join(map(str, values))}); "
                f"the scenario takes {getattr(first, name)} from {traces[0].path}"
            )
    return notes


def budget_of(traces: list[Trace], notes: list[str]) -> int:
    """B: the first trace's, or when it declares none, the most metric calls a run made."""
    declared = traces[0].run_start.budget
    if declared:
        return declared
    made = max(summarize(t).metric_calls for t in traces)
    notes.append(
        f"{traces[0].path} declares no budget (a run stopped by its own stop_callbacks): "
        f"B is the most metric calls a run made, {made}"
    )
    return made


def lm_servers_of(
    traces: list[Trace], given: int | None, notes: list[str]
) -> tuple[int | None, str]:
    """The LM pool's size and where it came from: as given, else as the traces' run_start
    meta declares it."""
    declared_by = {
        t.path: t.run_start.meta["lm_servers"] for t in traces if "lm_servers" in t.run_start.meta
    }
    for path, value in declared_by.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PxnError(
                f"{path}: run_start meta lm_servers is {value!r}, not a whole number >= 1"
            )
    declared = sorted(set(declared_by.values()))
    if given is not None:
        if given < 1:
            raise PxnError(f"must be >= 1: got {given}", subject="LM servers")
        if declared and declared != [given]:
            notes.append(f"the traces declare lm_servers {declared}; {given} as given overrides it")
        return given, "as given"
    if not declared:
        return None, ""
    if len(declared) > 1:
        notes.append(f"traces differ in lm_servers ({declared}); the scenario takes the smallest")
    return declared[0], "from the traces' run_start"


def run_ended(trace: Trace) -> str:
    """How the run ended, in words: its status, where it was, its message."""
    end = trace.run_end
    if end is not None and end.status == "completed":
        start = trace.run_start
        if 0 < start.budget <= start.valset_size:
            return (
                f"completed after {end.iterations} iteration(s): B={start.budget} covered only "
                f"the seed's validation (V={start.valset_size})"
            )
        return f"completed after {end.iterations} iteration(s)"
    reached = max(getattr(e, "iteration", 0) for e in trace.events)
    where = f"in iteration {reached}" if reached else "in the seed's validation"
    if end is None:
        return f"cut short before its run_end, {where}"
    said = f": {end.message}" if end.message else ""
    return f"{end.status} {where}{said}"


MAX_NAMED = 3  # runs named in a refusal, which stays one line


def runs_ended(traces: list[Trace]) -> str:
    """How each run ended, for a one-line refusal (the first few runs)."""
    named = "; ".join(f"{t.path}: {run_ended(t)}" for t in traces[:MAX_NAMED])
    more = len(traces) - MAX_NAMED
    return named + (f"; and {more} more run(s)" if more > 0 else "")


def note_incomplete_runs(traces: list[Trace], notes: list[str]) -> None:
    for trace in traces:
        end = trace.run_end
        if end is None or end.status != "completed":
            notes.append(
                f"{trace.path}: run did not complete ({run_ended(trace)}); its events still count"
            )


def worker_split(traces: list[Trace], notes: list[str]) -> str:
    """How the runs' workers served a stage's candidates: per_candidate or pooled."""
    splits = ["per_candidate" if "dspy" in t.run_start.meta else "pooled" for t in traces]
    kinds = sorted(set(splits))
    if len(kinds) > 1:
        notes.append(
            f"traces differ in how their workers served candidates ({', '.join(kinds)}); "
            f"the scenario takes {splits[0]} from {traces[0].path}"
        )
    return splits[0]


def optimizer_of(traces: list[Trace]) -> str:
    """Who ran the loop: dspy.GEPA when the first run's recording says dspy and its
    reflections ran one at a time (DSPy's adapter proposes each text itself), gepa
    otherwise."""
    start = traces[0].run_start
    dspy = "dspy" in start.meta and start.reflection_concurrency == 1
    return "dspy.GEPA" if dspy else "gepa"


def calibrated_on(traces: list[Trace]) -> CalibratedOn:
    """The longest run's metric calls and proposals: how far the traces reach."""
    runs = [summarize(t) for t in traces]
    return CalibratedOn(
        runs=len(runs),
        metric_calls=max(r.metric_calls for r in runs),
        proposals=max(r.proposals for r in runs),
    )
