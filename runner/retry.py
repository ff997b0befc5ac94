"""Bounded retries with exponential backoff for LM calls, every attempt reported.

Transient failures are retried; one a retry cannot fix (bad key, bad request,
unknown model) fails at once. The caller gets every failed attempt through
`on_failure` and decides what a final failure means.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import litellm

from pxn.runner.redact import describe_error

T = TypeVar("T")

# Retrying these cannot help.
_PERMANENT = (
    litellm.exceptions.AuthenticationError,
    litellm.exceptions.PermissionDeniedError,
    litellm.exceptions.NotFoundError,
    litellm.exceptions.BadRequestError,
)
# These are worth another try.
_TRANSIENT = (
    litellm.exceptions.RateLimitError,
    litellm.exceptions.Timeout,
    litellm.exceptions.APIConnectionError,
    litellm.exceptions.InternalServerError,
    litellm.exceptions.ServiceUnavailableError,
    litellm.exceptions.BadGatewayError,
    litellm.exceptions.APIError,
    ConnectionError,
    TimeoutError,
)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay: float = 0.25  # seconds before the 2nd attempt; doubles each time
    max_delay: float = 4.0
    timeout: float = 120.0  # per attempt, passed to the LM client

    def delay(self, failed_attempts: int, rng: random.Random) -> float:
        # Full jitter: spreads out clients that failed together (a 429 burst).
        cap = min(self.max_delay, self.base_delay * 2 ** (failed_attempts - 1))
        return rng.uniform(cap / 2, cap)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _PERMANENT) and not isinstance(exc, litellm.exceptions.RateLimitError):
        return False
    return isinstance(exc, _TRANSIENT)


@dataclass(frozen=True)
class FailedAttempt:
    attempt: int  # 1-based
    start: float  # clock() at the attempt's start
    end: float
    error: str  # redacted one-liner


class CallFailed(Exception):
    """Every attempt failed (or a permanent error): `error` is the last, redacted."""

    def __init__(self, error: str, attempts: int):
        super().__init__(error)
        self.error = error
        self.attempts = attempts


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    clock: Callable[[], float],
    on_failure: Callable[[FailedAttempt], None],
) -> tuple[T, int]:
    """Return (fn's result, attempts used); raise CallFailed when no attempt succeeded."""
    rng = random.Random()
    for attempt in range(1, policy.max_attempts + 1):
        start = clock()
        try:
            return fn(), attempt
        except Exception as exc:
            error = describe_error(exc)
            on_failure(FailedAttempt(attempt, start, clock(), error))
            if not is_transient(exc) or attempt == policy.max_attempts:
                raise CallFailed(error, attempt) from None
        # Backoff between attempts of one call; bounded by policy.max_delay.
        time.sleep(policy.delay(attempt, rng))
    raise AssertionError("unreachable")
