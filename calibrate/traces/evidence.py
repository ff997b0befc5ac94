"""What every fit of a calibration reads, gathered once: the traces, their units, the notes.

gather_evidence loads the traces, reads what they declare (run_setup.py:
whether their setups agree, the LM pool's size), refuses in one line traces
no scenario can come from (no reflection, no judged proposal: a run that
failed, was interrupted or was cut short too early, or whose budget covered
only the seed's validation; the line says how each run ended) and prices
they cannot support (no token counts), notes failed rollouts, and cuts the
traces into units (units.py). The fitted parts (parts.py) then add their
notes to its list, in the order they run: the report prints them so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pxn.calibrate.traces.run_setup import lm_servers_of, runs_ended, setup_notes
from pxn.calibrate.traces.tokens import missing_token_counts
from pxn.calibrate.traces.units import Units, cut_into_units
from pxn.errors import PxnError
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
