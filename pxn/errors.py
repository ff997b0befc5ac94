"""The one error type a user can cause.

Anything raised as `PxnError` is a mistake in the user's input (a flag, a
scenario file, a trace). The CLI prints its message as one line on stderr and
exits with code 2; every other exception is a bug and keeps its traceback.
"""


class PxnError(Exception):
    """Bad input: the message names what was wrong and how to fix it."""
