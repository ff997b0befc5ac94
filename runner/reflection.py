"""The instrumented reflection LM: the P*N reflections of a step run at once, cap C.

gepa 0.1.4 runs reflections concurrently only when the reflection LM object
has `batch_complete(messages_list)`; a plain callable is called one prompt at
a time. It also wraps any LM lacking `total_cost` in a tracker that hides
`batch_complete`, so this object exposes the cost and token totals itself.

Each LM call writes one Reflection event. When one call of a batch fails
after its retries, `batch_complete` raises; gepa then retries the batch task
by task through `__call__`, which answers the tasks that succeeded from the
batch's results (no second LM call, no second event) and re-raises for the
failed ones, so gepa drops exactly those.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pxn.runner.lm import CallSite, ChatModel, LMReply
from pxn.runner.recorder import Recorder
from pxn.runner.retry import CallFailed, FailedAttempt
from pxn.trace import Reflection


class ReflectionFailed(RuntimeError):
    pass


def has_fence_pair(text: str) -> bool:
    """Whether gepa will find a new text in the reply: it takes what lies between the first
    and last ```, and without a pair the WHOLE reply, chatter included."""
    first = text.find("```")
    return first >= 0 and text.rfind("```") > first


def _content(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    return "\n".join(str(m.get("content", "")) for m in messages)


class InstrumentedReflectionLM:
    def __init__(
        self,
        lm: ChatModel,
        recorder: Recorder,
        concurrency: int,
        lm_kwargs: dict[str, Any] | None = None,
    ):
        self.lm = lm
        self.recorder = recorder
        self.lm_kwargs = dict(lm_kwargs or {})
        self._slots = itertools.count()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="reflect", initializer=self._init_slot
        )
        self._lock = threading.Lock()
        # Results of the last batch, by prompt text, for gepa's task-by-task retry.
        self._answers: dict[str, list[str | CallFailed]] = {}
        self._iteration = -1
        self.calls = 0
        self._cost: float | None = None
        self._tokens_in = 0
        self._tokens_out = 0

    def _init_slot(self) -> None:
        self._local.slot = next(self._slots)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # gepa reads these (and would otherwise wrap us, hiding batch_complete).
    @property
    def total_cost(self) -> float:
        return self._cost or 0.0

    @property
    def total_tokens_in(self) -> int:
        return self._tokens_in

    @property
    def total_tokens_out(self) -> int:
        return self._tokens_out

    def _fresh_iteration(self) -> None:
        if self._iteration != self.recorder.iteration:
            self._iteration = self.recorder.iteration
            self._answers.clear()

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        self._fresh_iteration()
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        stored = self._answers.get(_content(messages))
        if stored:
            answer = stored.pop(0)
            if isinstance(answer, CallFailed):
                raise ReflectionFailed(answer.error)
            return answer
        (job,) = self.recorder.reflection_jobs(1)
        answer = self._pool.submit(self._call, messages, job).result()
        self._report([job], [answer])
        if isinstance(answer, CallFailed):
            # gepa retries a failed reflection once through this same method: keep the
            # failure so that retry re-raises instead of making (and tracing) a new call.
            self._answers.setdefault(_content(messages), []).append(answer)
            raise ReflectionFailed(answer.error)
        return answer

    def batch_complete(self, messages_list: list[list[dict[str, Any]]]) -> list[str]:
        self._fresh_iteration()
        jobs = self.recorder.reflection_jobs(len(messages_list))
        futures = [
            self._pool.submit(self._call, messages, job)
            for messages, job in zip(messages_list, jobs, strict=True)
        ]
        answers = [f.result() for f in futures]
        self._report(jobs, answers)
        failed = [a for a in answers if isinstance(a, CallFailed)]
        if not failed:
            return answers  # type: ignore[return-value]
        for messages, answer in zip(messages_list, answers, strict=True):
            self._answers.setdefault(_content(messages), []).append(answer)
        raise ReflectionFailed(f"{len(failed)} of {len(answers)} reflections failed")

    def _report(self, jobs: list[tuple[str, str]], answers: list[str | CallFailed]) -> None:
        # In gepa's job order (not completion order): on_proposal_end follows it.
        for (proposal, _), answer in zip(jobs, answers, strict=True):
            failed = isinstance(answer, CallFailed)
            self.recorder.reflection_outcome(proposal, not failed, answer.error if failed else None)

    def _call(self, messages: list[dict[str, Any]], job: tuple[str, str]) -> str | CallFailed:
        proposal, parent = job
        rec = self.recorder
        slot = self._local.slot
        iteration = rec.iteration

        def on_failure(failed: FailedAttempt) -> None:
            rec.write_attempt(
                failed,
                iteration=iteration,
                call="reflection",
                phase="reflection",
                slot=slot,
                number=failed.attempt,
            )

        start = rec.clock()
        reply: LMReply | None = None
        try:
            reply, attempts = self.lm.complete(
                messages,
                clock=rec.clock,
                on_failure=on_failure,
                site=CallSite("reflection", iteration),
                **self.lm_kwargs,
            )
            result: str | CallFailed = reply.text
            error, fenced = None, has_fence_pair(reply.text)
        except CallFailed as exc:
            result, attempts, error, fenced = exc, exc.attempts, exc.error, None
        end = rec.clock()
        rec.write(
            Reflection(
                start=start,
                end=end,
                iteration=iteration,
                slot=slot,
                proposal=proposal,
                parent=parent,
                tokens_in=reply.tokens_in if reply else None,
                tokens_out=reply.tokens_out if reply else None,
                cost=reply.cost if reply else None,
                error=error,
                attempts=attempts,
                fenced=fenced,
            )
        )
        with self._lock:
            self.calls += 1
            if fenced is False:
                rec.fenced_missing += 1
            if reply is not None:
                self._tokens_in += reply.tokens_in or 0
                self._tokens_out += reply.tokens_out or 0
                if reply.cost is not None:
                    self._cost = (self._cost or 0.0) + reply.cost
        return result
