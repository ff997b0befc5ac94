"""gepa's merges, as merge events.

gepa 0.1.4 (use_merge) may attempt a merge at the top of an iteration: it
scores the merged program on a validation subsample through the adapter's
`evaluate` (the only evaluation gepa asks without traces), then tells
on_merge_attempted, and on_merge_accepted (after the merged program's full
validation) or on_merge_rejected. The parents' and the merged program's
subsample scores and the common ancestor are in the iteration's entry of
gepa's `full_program_trace`, written before on_merge_attempted. A merge still
waiting when its iteration ends (an interrupt during its full validation)
was not accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.runner.recording.sink import TraceSink
from pxn.trace import Merge


def merge_proposal(iteration: int) -> str:
    """The merged program's name in its rollouts: gepa attempts one merge an iteration."""
    return f"{iteration}-merge"


@dataclass
class PendingMerge:
    proposal: str
    parents: str
    ancestor: str | None
    time: float
    before: float | None
    after: float | None


class Merges:
    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._iteration = 0
        self._pending: PendingMerge | None = None

    def new_iteration(self, number: int) -> None:
        self._iteration = number
        self._pending = None

    def attempted_now(self, parents: list[int], state: Any, now: float) -> None:
        """gepa judged a merge of `parents` at `now`; `state` is its GEPAState."""
        entry = state.full_program_trace[-1] if state is not None else {}
        entities = entry.get("merged_entities")
        sums = [entry.get(key) for key in ("id1_subsample_scores", "id2_subsample_scores")]
        after = entry.get("new_program_subsample_scores")
        self._pending = PendingMerge(
            proposal=merge_proposal(self._iteration),
            parents=",".join(str(p) for p in parents),
            ancestor=None if entities is None else str(entities[2]),
            time=now,
            before=None if None in sums else float(max(sum(s) for s in sums)),
            after=None if after is None else float(sum(after)),
        )

    def decided(self, accepted: bool, candidate: int | None = None) -> None:
        """gepa accepted the merge (it joined the pool as `candidate`) or rejected it."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        self._sink.write(
            Merge(
                start=pending.time,
                end=pending.time,
                iteration=self._iteration,
                proposal=pending.proposal,
                parents=pending.parents,
                ancestor=pending.ancestor,
                accepted=accepted,
                candidate=None if candidate is None else str(candidate),
                score_before=pending.before,
                score_after=pending.after,
            )
        )

    def end_iteration(self) -> None:
        """A merge still waiting was not accepted."""
        self.decided(accepted=False)
