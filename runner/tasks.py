"""Tasks: what a real run optimizes, and the plug-in form for the user's own.

A task is data splits, a seed candidate, the program run per example and a
metric returning a score with textual feedback (GEPA reflects on the
feedback). `--task NAME` picks a built-in task; `--task module:function`
imports `module` and calls `function()`, which returns a `Task`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pxn.errors import PxnError

# The program gets this to call the run's task LM: lm(messages, **litellm kwargs) -> text.
# It retries transient errors and counts tokens; a program may call litellm itself instead.
LMCall = Callable[..., str]


@dataclass(frozen=True)
class Feedback:
    score: float  # higher is better; gepa's perfect score is 1.0
    feedback: str  # why, in words the reflection LM can act on


@dataclass
class Task:
    name: str
    description: str
    train: Sequence[Any]
    val: Sequence[Any]
    seed_candidate: dict[str, str]
    # program(candidate, example, lm) -> output text
    program: Callable[[dict[str, str], Any, LMCall], str]
    # metric(example, output) -> Feedback
    metric: Callable[[Any, str], Feedback]
    test: Sequence[Any] = ()
    # record(example, output, feedback) -> what the reflection LM sees for one example
    record: Callable[[Any, str, Feedback], dict[str, str]] | None = None
    reflection_prompt_template: str | None = None
    minibatch: int = 3
    # Defaults for the task LM's calls (temperature, max_tokens) unless overridden.
    lm_kwargs: dict[str, Any] = field(default_factory=dict)
    reflection_lm_kwargs: dict[str, Any] = field(default_factory=dict)

    def splits(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def builtin_tasks() -> dict[str, Callable[[], Task]]:
    # Imported here so listing tasks does not build them.
    from pxn.runner.topic_task import make_topic_task

    return {"topics": make_topic_task}


def load_task(spec: str | None) -> Task:
    """A built-in task by name (default: the first), or `module:function` for a plug-in."""
    builtins = builtin_tasks()
    if not spec:
        spec = next(iter(builtins))
    if spec in builtins:
        task = builtins[spec]()
    elif ":" in spec:
        task = _load_plugin(spec)
    else:
        raise PxnError(
            f"unknown task {spec!r}; built-in tasks: {', '.join(builtins)}; "
            "or pass module:function returning a pxn.runner.tasks.Task"
        )
    if not task.train or not task.val:
        raise PxnError(f"task {spec!r} needs a non-empty train and val split")
    if not task.seed_candidate:
        raise PxnError(f"task {spec!r} has an empty seed candidate")
    if task.minibatch < 1:
        raise PxnError(f"task {spec!r}: minibatch must be at least 1")
    return task


def _load_plugin(spec: str) -> Task:
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PxnError(
            f"cannot import task module {module_name!r} ({exc.msg}); is it on PYTHONPATH?"
        ) from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise PxnError(f"task module {module_name!r} has no function {func_name!r}")
    task = factory()
    if not isinstance(task, Task):
        raise PxnError(f"{spec} returned {type(task).__name__}, expected pxn.runner.tasks.Task")
    return task
