"""pxn's own reflection LM: the P*N reflections of an iteration run at once, cap C, each retried.

gepa 0.1.4 runs reflections concurrently only through `batch_complete`, and
hides it behind a tracker for an LM without `total_cost`, so this object keeps
its own totals. When one call of a batch fails after its retries, gepa retries
the batch task by task through `__call__`, which answers the tasks that
succeeded from the batch's results (no second LM call) and re-raises for the
failed ones.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from functools import partial
from typing import Any

from pxn.runner.adapter import SlotThreads, report_failure
from pxn.runner.lm import CallSite, ChatModel, LMReply
from pxn.runner.prompt_prefix import prompt_text
from pxn.runner.record import Recording, ReflectionReport
from pxn.runner.retry import CallFailed


class ReflectionFailed(RuntimeError):
    pass


class InstrumentedReflectionLM:
    def __init__(
        self,
        lm: ChatModel,
        recording: Recording,
        concurrency: int,
        lm_kwargs: dict[str, Any] | None = None,
    ):
        self.lm = lm
        self.recording = recording
        self.lm_kwargs = dict(lm_kwargs or {})
        self._threads = SlotThreads(concurrency, "reflect")
        self._lock = threading.Lock()
        # Results of the last batch, by prompt text, for gepa's task-by-task retry.
        self._answers: dict[str, list[str | CallFailed]] = {}
        self._iteration = -1
        # gepa reads these (and would otherwise wrap us, hiding batch_complete).
        self.total_cost = 0.0
        self.total_tokens_in = 0
        self.total_tokens_out = 0

    def close(self) -> None:
        self._threads.close()

    def _fresh_iteration(self) -> None:
        if self._iteration != self.recording.iteration:
            self._iteration = self.recording.iteration
            self._answers.clear()

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        self._fresh_iteration()
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        stored = self._answers.get(prompt_text(messages))
        if stored:
            self.recording.report_reflection(0, None)  # answered from the batch: no call
            answer = stored.pop(0)
        else:
            answer = self._threads.submit(self._call, 0, messages).result()
            if isinstance(answer, CallFailed):
                # gepa retries a failed reflection once through this same method: keep the
                # failure so that retry re-raises instead of making (and tracing) a new call.
                self._answers.setdefault(prompt_text(messages), []).append(answer)
        if isinstance(answer, CallFailed):
            raise ReflectionFailed(answer.error)
        return answer

    def batch_complete(self, messages_list: list[list[dict[str, Any]]]) -> list[str]:
        self._fresh_iteration()
        futures = [
            self._threads.submit(self._call, index, messages)
            for index, messages in enumerate(messages_list)
        ]
        answers = [f.result() for f in futures]
        failed = [a for a in answers if isinstance(a, CallFailed)]
        if not failed:
            return answers  # type: ignore[return-value]
        for messages, answer in zip(messages_list, answers, strict=True):
            self._answers.setdefault(prompt_text(messages), []).append(answer)
        raise ReflectionFailed(f"{len(failed)} of {len(answers)} reflections failed")

    def _call(self, index: int, messages: list[dict[str, Any]]) -> str | CallFailed:
        rec = self.recording
        slot = self._threads.slot
        start = rec.clock()
        reply: LMReply | None = None
        try:
            reply, attempts = self.lm.complete(
                messages,
                clock=rec.clock,
                on_failure=partial(report_failure, rec, "reflection", slot),
                site=CallSite("reflection", rec.iteration),
                **self.lm_kwargs,
            )
            result: str | CallFailed = reply.text
            error = None
        except CallFailed as exc:
            result, attempts, error = exc, exc.attempts, exc.error
        # An LMReply's fields (text, tokens, cost) are ReflectionReport's too.
        told = asdict(reply) if reply is not None else {}
        report = ReflectionReport(
            start=start,
            end=rec.clock(),
            slot=slot,
            prompt=prompt_text(messages),
            error=error,
            attempts=attempts,
            **told,
        )
        rec.report_reflection(index, report)
        if reply is not None:
            with self._lock:
                self.total_tokens_in += reply.tokens_in or 0
                self.total_tokens_out += reply.tokens_out or 0
                self.total_cost += reply.cost or 0.0
        return result
