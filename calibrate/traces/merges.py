"""gepa's merge from the traces: the runs' merge setup, and how often a merge passed.

The setup is read from run_start meta (use_merge, max_merge_invocations, components);
a trace declaring none ran without merge, and where traces differ the first's is taken
with a note. merge_acceptance is (accepted + 1) / (judged + 2), the posterior mean under
a uniform prior, since a run judges only a handful of merges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pxn.trace_reading import Trace

if TYPE_CHECKING:
    from pxn.calibrate.traces.draws import Resample
    from pxn.calibrate.traces.pipeline import Calibration

UNDECLARED = {"use_merge": False, "max_merge_invocations": 5, "components": 1}


@dataclass(frozen=True)
class MergeFit:
    merge: bool
    max_merges: int
    components: int
    judged: int  # merges gepa judged in the traces
    accepted: int

    @property
    def merges(self) -> bool:
        """Whether gepa could merge anything: merge on, and two components or more."""
        return self.merge and self.components > 1

    @property
    def rate(self) -> float:
        return merge_rate(self.judged, self.accepted)

    def scenario_fields(self) -> dict[str, Any]:
        """The scenario's merge fields (none when the runs ran without merge)."""
        if not self.merge:
            return {}
        fields = {"merge": True, "max_merges": self.max_merges, "components": self.components}
        return fields | ({"merge_acceptance": self.rate} if self.merges else {})


def merge_rate(judged: float, accepted: float) -> float:
    """merge_acceptance from the merges judged and accepted."""
    return (accepted + 1) / (judged + 2)


def fit_merges(
    traces: list[Trace], judged: np.ndarray, accepted: np.ndarray, notes: list[str]
) -> MergeFit:
    """`judged`, `accepted`: the merges per unit (units.py)."""
    declared = [
        {key: t.run_start.meta.get(key, value) for key, value in UNDECLARED.items()} for t in traces
    ]
    first = declared[0]
    differ = sorted({key for setup in declared for key in setup if setup[key] != first[key]})
    if differ:
        notes.append(
            f"traces differ in gepa's merge setup ({', '.join(differ)}); the scenario takes "
            f"{traces[0].path}'s"
        )
    fit = MergeFit(
        merge=bool(first["use_merge"]),
        max_merges=int(first["max_merge_invocations"]),
        components=int(first["components"]),
        judged=int(judged.sum()),
        accepted=int(accepted.sum()),
    )
    if fit.merge and not fit.merges:
        notes.append(
            "gepa's merge was on, for a program of one component, which it never merges: "
            "the scenario's merge changes nothing"
        )
    elif fit.merges and fit.judged == 0:
        notes.append(
            "gepa's merge was on, but the traces hold no merge it judged: merge_acceptance "
            "= 0.5 is unmeasured"
        )
    return fit


def draw_merge_acceptance(resample: Resample) -> dict[str, float]:
    """How often a merge passed, where gepa could merge, refitted to a resample."""
    if resample.scenario.merge_acceptance is None:
        return {}
    units = resample.units
    return {"merge_acceptance": merge_rate(units.merges.sum(), units.merges_accepted.sum())}


def merge_lines(cal: Calibration) -> list[str]:
    """gepa's merge: the runs' setup, and how often a merge passed its subsample."""
    m = cal.merges
    if not m.merge:
        return ["merge: off in the runs (gepa's use_merge)"]
    setup = (
        f"merge: on in the runs (use_merge, at most {m.max_merges} accepted; a program of "
        f"{m.components} component(s))"
    )
    if not m.merges:
        return [f"{setup}: gepa merges only programs of two components or more"]
    judged = (
        f"{m.accepted}/{m.judged} merges passed their subsample" if m.judged else "no merge judged"
    )
    return [
        f"{setup}; {judged} -> merge_acceptance=(accepted + 1)/(judged + 2)={m.rate:.3g}",
        "  merge latency: the merge's subsample rollouts are rollouts (phase merge_subsample)",
    ]
