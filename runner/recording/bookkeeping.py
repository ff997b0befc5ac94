"""Which task of gepa's iteration each proposal, reflection and child belongs to.

gepa's callbacks tell the tasks of an iteration in order; the reflection
calls come after, one LM call per job, in job order. When a call of that pass
raises, gepa 0.1.4 throws the pass away and asks again job by job, so a
retried job keeps its proposal id: "i-j", task j of iteration i (skipped
tasks keep their numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReflectionJob:
    task: int  # the task's position in the iteration; -1 when more jobs came than tasks started
    proposal: str  # "i-j"; "i-?" for a job of no known task
    parent: str  # the parent's pool index; "-1" when gepa selected none seen, "?" unknown


@dataclass
class IterationBook:
    """One iteration's tasks, proposals and reflection passes."""

    number: int
    start: float
    task_parents: list[int] = field(default_factory=list)  # on_candidate_selected, in task order
    task_cursor: int = 0  # tasks seen in stage 3a (skipped or started)
    started: list[int] = field(default_factory=list)  # task indices whose reflection started
    issued: int = 0  # reflection jobs handed to the LM so far in this pass (gepa's job order)
    retrying: bool = False  # the first pass failed: gepa asks again for every job, one by one
    outcome: dict[int, bool] = field(default_factory=dict)  # task index -> reply usable
    errors: dict[int, str] = field(default_factory=dict)  # task index -> its last try's error
    ended: int = 0  # on_proposal_end count
    proposed: set[int] = field(default_factory=set)  # tasks whose proposal ended (texts given)

    def proposal_id(self, task: int) -> str:
        return f"{self.number}-{task}"

    def task_skipped(self) -> None:
        self.task_cursor += 1

    def proposal_started(self) -> None:
        self.started.append(self.task_cursor)
        self.task_cursor += 1

    def next_jobs(self, count: int) -> list[ReflectionJob]:
        """The jobs of a reflection call asking for `count` replies, in job order."""
        jobs = []
        for task in self.started[self.issued : self.issued + count]:
            parent = self.task_parents[task] if task < len(self.task_parents) else -1
            jobs.append(ReflectionJob(task, self.proposal_id(task), str(parent)))
        while len(jobs) < count:  # more calls than jobs seen starting: label honestly
            jobs.append(ReflectionJob(-1, f"{self.number}-?", "?"))
        self.issued += count
        return jobs

    def reflected(self, jobs: list[ReflectionJob], error: str | None) -> None:
        """A reflection call of these jobs returned or raised `error`; a raise in the
        iteration's first pass sends gepa back to its first job."""
        ok = error is None
        for job in jobs:
            self.outcome[job.task] = ok
            if error is not None:
                self.errors[job.task] = error
        if not ok and not self.retrying:
            self.issued = 0
            self.retrying = True

    def proposal_ended(self) -> int | None:
        """The task whose proposal ended (gepa tells each job whose reflection gave texts, in
        job order); None when no task started is left for it."""
        self.ended += 1
        ok_tasks = [task for task in self.started if self.outcome.get(task, True)]
        if self.ended > len(ok_tasks):
            return None
        task = ok_tasks[self.ended - 1]
        self.proposed.add(task)
        return task if task < len(self.task_parents) else None
