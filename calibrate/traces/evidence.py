"""What every fit of a calibration reads, gathered once: the traces, their units, the notes.

gather_evidence loads the traces, reads what they declare (run_setup.py:
whether their setups agree, the LM pool's size), refuses traces no scenario
can come from (no reflection) and prices they cannot support (no token
counts), and cuts them into units (units.py). The fitted parts (parts.py)
then add their notes to its list, in the order they run: the report prints
them so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pxn.calibrate.traces.run_setup import lm_servers_of, setup_notes
from pxn.calibrate.traces.tokens import missing_token_counts
from pxn.calibrate.traces.units import Units, cut_into_units
from pxn.errors import PxnError
from pxn.trace import Loaded, Reflection, Rollout, Trace, load_traces


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
            "calibrated; run until at least one iteration completes"
        )
    missing_tokens = missing_token_counts(rollouts, reflections)
    if priced and missing_tokens:
        raise PxnError(
            f"prices tokens, but no call in the traces reports its "
            f"{', '.join(missing_tokens)}; calibrate without it, or from traces with token counts",
            subject="task model",
        )
    return Evidence(
        loaded=loaded,
        units=cut_into_units(traces),
        rollouts=rollouts,
        reflections=reflections,
        lm_servers=servers,
        lm_servers_source=source,
        tokens_missing=missing_tokens,
        notes=notes,
    )
