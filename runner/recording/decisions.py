"""gepa's verdict on every proposal, as a decision event.

The selection wrapper tells the recorder each proposal of an iteration and which
were chosen (full validation comes next). A chosen child that joins the pool
(on_candidate_accepted) is an acceptance; every proposal still waiting when
its iteration ends was rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.runner.recording.labels import CandidateKey, candidate_key
from pxn.runner.recording.sink import TraceSink
from pxn.trace import Decision


@dataclass
class Pending:
    """A proposal judged by gepa's selection, waiting to learn its candidate index."""

    proposal: str
    parent: str
    key: CandidateKey
    time: float
    before: float
    after: float
    selected: bool


class Decisions:
    def __init__(self, sink: TraceSink):
        self._sink = sink
        self._iteration = 0
        self._pending: list[Pending] = []
        self.accepted = 0  # read by the live progress line
        self.judged_ids: set[str] = set()  # the iteration's proposals gepa's selection saw

    def new_iteration(self, number: int) -> None:
        self._iteration = number
        self._pending = []
        self.judged_ids = set()

    def judged(self, proposals: list[Any], chosen: list[Any], now: float) -> None:
        """gepa's selection saw `proposals` (gepa's CandidateProposal) and chose `chosen`."""
        chosen_ids = {id(p) for p in chosen}
        self.judged_ids |= {str(p.metadata.get("proposal_id", "?")) for p in proposals}
        for p in proposals:
            self._pending.append(
                Pending(
                    proposal=str(p.metadata.get("proposal_id", "?")),
                    parent=",".join(str(i) for i in p.parent_program_ids),
                    key=candidate_key(p.candidate),
                    time=now,
                    before=float(sum(p.subsample_scores_before or [])),
                    after=float(sum(p.subsample_scores_after or [])),
                    selected=id(p) in chosen_ids,
                )
            )

    def joined(self, candidate: dict[str, str], index: int) -> None:
        """`candidate` joined gepa's pool as `index`: its proposal was accepted."""
        key = candidate_key(candidate)
        for pending in self._pending:
            if pending.selected and pending.key == key:
                self._pending.remove(pending)
                self._decide(pending, accepted=True, candidate=str(index))
                break

    def end_iteration(self) -> None:
        """The proposals still waiting were rejected."""
        for pending in self._pending:
            self._decide(pending, accepted=False, candidate=None)
        self._pending.clear()

    def _decide(self, pending: Pending, *, accepted: bool, candidate: str | None) -> None:
        self.accepted += accepted
        self._sink.write(
            Decision(
                start=pending.time,
                end=pending.time,
                iteration=self._iteration,
                proposal=pending.proposal,
                parent=pending.parent,
                accepted=accepted,
                candidate=candidate,
                score_before=pending.before,
                score_after=pending.after,
            )
        )
