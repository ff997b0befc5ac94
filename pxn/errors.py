"""The one error type a user can cause.

A `PxnError` is a mistake in the user's input (a flag, a scenario file, a
trace): the CLI prints it as one line and exits with code 2; any other
exception is a bug and keeps its traceback. Its `subject` is the input at
fault in the domain's words ("workers") and its `problem` what is wrong; the
CLI, knowing which flag carried that input, names the flag (`naming`).
"""

from __future__ import annotations


class PxnError(Exception):
    """Bad input: the message names what was wrong and how to fix it."""

    def __init__(self, problem: str, *, subject: str | None = None):
        self.problem = problem
        self.subject = subject
        super().__init__(f"{subject} {problem}" if subject else problem)

    def naming(self, name: str) -> PxnError:
        """The same error, its subject called `name` (a flag, such as --workers)."""
        return PxnError(self.problem, subject=name)
