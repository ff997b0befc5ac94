"""The one error type a user can cause.

Anything raised as `PxnError` is a mistake in the user's input (a flag, a
scenario file, a trace). The CLI prints its message as one line on stderr and
exits with code 2; every other exception is a bug and keeps its traceback.

A library error names what was wrong in the domain's words: its `subject` is
the input at fault ("workers", "shape", "ray address") and its `problem` what
is wrong with it ("must be a whole number >= 1: got 0"). The CLI, which knows
which of its flags carried that input, says the flag instead
(`PxnError.naming`), so no flag name lives in the library.
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
