"""A simulated run's trace, in the one schema the real runner writes (pxn.trace).

`NoTrace` does nothing, so a run without a trace pays nothing for one; its
`enabled` tells the stages not to work out who ran where. `SimTrace` writes
every event: each call on its slot (a rollout's slot is a worker slot: with
fewer LM servers than workers only the first `servers` are ever used), with
its tokens and dollars when counted; each stage between its barriers; each
proposal's decision and each merge's verdict; each task that ended without a
proposal (a perfect parent skipped, a proposal lost); each iteration. The parent
stage's rollouts are those gepa ran: one per example of each distinct
(parent, minibatch) pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.accounting import TokenCounts
from pxn.sim.gepa_rules import FAILED, MergeTask, ProposalTask
from pxn.sim.minibatches import EpochSampler
from pxn.trace import (
    Decision,
    Iteration,
    Merge,
    NoProposal,
    Reflection,
    Rollout,
    RunEnd,
    RunStart,
    Stage,
    TraceWriter,
    Validation,
)

# A rollout item's examples: the whole valset, a minibatch chunk's number, or a list of
# validation examples (a merge's subsample).
VALSET = None
# A stage's items: (candidate, examples) for rollouts, (proposal, parent) for reflections.
Items = Sequence[tuple[str, int | list[int] | None]] | Sequence[tuple[str, str]]


def instant(now: float, iteration: int) -> dict[str, Any]:
    """An event's time fields, for one at an instant of this iteration."""
    return {"start": now, "end": now, "iteration": iteration}


class NoTrace:
    """No trace asked for: every event is dropped unmade (SimTrace's methods say what each is)."""

    enabled = False
    sampler: EpochSampler | None = None  # the run's, for the examples of a minibatch

    # Each event's own signature, so a call is as cheap as a call gets (no *args).
    def run_start(self, scenario: Scenario, shape: Shape, replicate: int) -> None: ...
    def run_end(self, wall_clock: float, metric_calls: int, iterations: int) -> None: ...
    def calls(self, *stage_calls: object) -> None: ...  # never asked while not `enabled`
    def stage(self, iteration: int, name: str, start: float, end: float) -> None: ...
    def decisions(
        self,
        iteration: int,
        now: float,
        judged: list[ProposalTask],
        joined: list[ProposalTask],
        ids: list[str],
    ) -> None: ...
    def validations(
        self, iteration: int, now: float, candidates: list[str], scores: list[float], valset: int
    ) -> None: ...
    def merge(
        self, iteration: int, now: float, merge: MergeTask, proposal: str, new: str | None
    ) -> None: ...
    def no_proposals(
        self, iteration: int, now: float, tasks: list[ProposalTask], reason: str
    ) -> None: ...
    def iteration(self, iteration: int, start: float, end: float) -> None: ...


class SimTrace(NoTrace):
    enabled = True

    def __init__(self, writer: TraceWriter, scenario: Scenario):
        self.writer = writer
        self.prices = scenario.prices
        self.valset = [f"val:{i}" for i in range(scenario.valset_size)]

    def examples(self, iteration: int, key: int | list[int] | None) -> list[str]:
        """A rollout item's examples: the valset, a minibatch chunk's in this iteration, or
        these validation examples."""
        if key is VALSET:
            return self.valset
        if isinstance(key, list):
            return [self.valset[e] for e in key]
        return self.sampler.examples(iteration, int(key))

    def run_start(self, scenario: Scenario, shape: Shape, replicate: int) -> None:
        # The task model's servers and the merge's setup under the keys the runner writes.
        meta = {"scenario": scenario.to_dict(), "replicate": replicate}
        if scenario.loads.task.servers is not None:
            meta["lm_servers"] = scenario.loads.task.servers
        if scenario.merge:
            meta |= {"use_merge": True, "max_merge_invocations": scenario.max_merges}
            meta["components"] = scenario.components
        self.writer.write(
            RunStart(
                start=0.0,
                end=0.0,
                source="sim",
                shape=str(shape),
                budget=scenario.budget,
                workers=scenario.workers,
                reflection_concurrency=scenario.reflection_concurrency,
                valset_size=scenario.valset_size,
                trainset_size=scenario.trainset_size,
                minibatch=scenario.minibatch,
                seed=scenario.seed,
                meta=meta,
            )
        )

    def run_end(self, wall_clock: float, metric_calls: int, iterations: int) -> None:
        self.writer.write(
            RunEnd(
                start=wall_clock,
                end=wall_clock,
                status="completed",
                metric_calls=metric_calls,
                iterations=iterations,
            )
        )

    def calls(
        self,
        role: str,
        iteration: int,
        phase: str,
        starts: list[float],
        durations: list[float],
        slots: list[int],
        items: Items,
        tokens: TokenCounts | None,
        scores: list[float] | None = None,
        errors: list[bool] | None = None,
    ) -> None:
        """Each call of a stage: its start, duration and slot; its item names it (a rollout's
        candidate and examples, a reflection's proposal and parent); its tokens and dollars
        when counted; a rollout's score when the search scores them; a reflection's error
        when it failed."""
        if role == "task":
            names = [(c, ex) for c, key in items for ex in self.examples(iteration, key)]
        else:
            names = list(items)
        if tokens is not None:  # as Python floats, which the trace writes
            tokens_in, tokens_out = tokens
            ins = tokens_in.tolist() if isinstance(tokens_in, np.ndarray) else None
            outs = tokens_out.tolist()
        for i, ((name, other), start, duration, slot) in enumerate(
            zip(names, starts, durations, slots, strict=True)
        ):
            spent = {}
            if tokens is not None:
                spent = self.spent(role, tokens_in if ins is None else ins[i], outs[i])
            common = instant(start, iteration) | {"end": start + duration}
            if role == "task":
                score = None if scores is None else scores[i]
                event = Rollout(
                    **common,
                    phase=phase,
                    worker=slot,
                    candidate=name,
                    example=other,
                    score=score,
                    **spent,
                )
            else:
                error = FAILED if errors is not None and errors[i] else None
                event = Reflection(
                    **common, slot=slot, proposal=name, parent=other, error=error, **spent
                )
            self.writer.write(event)

    def spent(self, role: str, tokens_in: float, tokens_out: float) -> dict[str, Any]:
        """A call's fields for what it used: whole tokens, and dollars when priced."""
        spent: dict[str, Any] = {"tokens_in": round(tokens_in), "tokens_out": round(tokens_out)}
        if self.prices is not None:
            spent["cost"] = self.prices.dollars(role, tokens_in, tokens_out)
        return spent

    def stage(self, iteration: int, name: str, start: float, end: float) -> None:
        self.writer.write(Stage(start=start, end=end, iteration=iteration, name=name))

    def decisions(
        self,
        iteration: int,
        now: float,
        judged: list[ProposalTask],
        joined: list[ProposalTask],
        ids: list[str],
    ) -> None:
        """Each judged proposal, with its minibatch sums when scored; those that `joined`
        the pool did so as `ids`."""
        joined_as = {task.proposal: c for task, c in zip(joined, ids, strict=True)}
        for task in judged:
            candidate = joined_as.get(task.proposal)
            self.writer.write(
                Decision(
                    **instant(now, iteration),
                    proposal=task.proposal,
                    parent=task.parent,
                    accepted=candidate is not None,
                    candidate=candidate,
                    score_before=task.before,
                    score_after=task.after,
                )
            )

    def validations(
        self, iteration: int, now: float, candidates: list[str], scores: list[float], valset: int
    ) -> None:
        """Each new candidate's mean validation score, from its `valset` scores in order."""
        for i, candidate in enumerate(candidates):
            mean = sum(scores[i * valset : (i + 1) * valset]) / valset
            self.writer.write(
                Validation(
                    **instant(now, iteration),
                    candidate=candidate,
                    score=mean,
                    examples=valset,
                )
            )

    def merge(
        self, iteration: int, now: float, merge: MergeTask, proposal: str, new: str | None
    ) -> None:
        """A merge's verdict; `new`, the candidate it joined the pool as when accepted."""
        triplet = merge.triplet
        self.writer.write(
            Merge(
                **instant(now, iteration),
                proposal=proposal,
                parents=f"{triplet.first},{triplet.second}",
                ancestor=str(triplet.ancestor),
                accepted=new is not None,
                candidate=new,
                score_before=merge.before,
                score_after=merge.after,
            )
        )

    def no_proposals(
        self, iteration: int, now: float, tasks: list[ProposalTask], reason: str
    ) -> None:
        """Each of these tasks ended without a proposal gepa judged, for `reason`."""
        for task in tasks:
            self.writer.write(
                NoProposal(
                    **instant(now, iteration),
                    proposal=task.proposal,
                    parent=task.parent,
                    reason=reason,
                    error=FAILED if reason == "reflection_failed" else None,
                )
            )

    def iteration(self, iteration: int, start: float, end: float) -> None:
        self.writer.write(Iteration(start=start, end=end, iteration=iteration))
