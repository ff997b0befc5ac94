"""A plug-in task for the tests (`--task tests.plugin_task:make_task` style), built on the
topics data. `make_failing_task` adds one validation example whose prompt always
fails on the fault server, so a rollout exhausts its retries deterministically."""

from __future__ import annotations

from dataclasses import replace

from pxn.runner.tasks import Task
from pxn.runner.topic_task import TopicExample, make_topic_task


def make_task() -> Task:
    return make_topic_task()


def make_failing_task() -> Task:
    task = make_topic_task()
    bad = TopicExample("val-bad", "ALWAYS_FAIL this sentence has no topic.", "food", "none")
    # No test split: its scoring happens outside the trace, so every fault the server
    # injects must then show up in the trace.
    return replace(task, name="topics-failing", val=[*task.val, bad], test=())
