"""`pxn tasks`: the built-in tasks `pxn run` can run."""

from __future__ import annotations

import typer

from pxn.api.console import say

commands = typer.Typer()


@commands.command("tasks")
def tasks_command() -> None:
    """List the built-in tasks and their split sizes."""
    from pxn.runner.tasks import builtin_tasks

    for name, make in builtin_tasks().items():
        task = make()
        sizes = ", ".join(f"{k} {v}" for k, v in task.splits().items())
        say(f"{name}: {task.description} ({sizes}; minibatch {task.minibatch})")
