"""One way to call a language model, whichever it is: the local pool or a litellm model string.

`ChatModel` is what the runner asks of a model; `LMClient` is the real one,
every call through the bounded retry loop with the tokens and cost litellm
reports. Keys come only from the environment. `probe` is the one call made
before a run, bounded by its own timeout, a failure the user's error.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import litellm

from pxn.errors import PxnError
from pxn.runner.lm_pool import MODEL_ALIAS, PoolInfo
from pxn.runner.redact import describe_error
from pxn.runner.retry import FailedAttempt, RetryPolicy, call_with_retries, is_transient
from pxn.runner.waits import PROBE_TIMEOUT, Tell, quiet

# litellm prints a "Give Feedback / Get Help" banner on every failed call; our
# retry loop records each failure in the trace instead.
litellm.suppress_debug_info = True


@dataclass(frozen=True)
class LMReply:
    text: str
    tokens_in: int | None
    tokens_out: int | None
    cost: float | None


@dataclass(frozen=True)
class CallSite:
    """What a call serves: a rollout phase or "reflection", in an iteration (0: the seed);
    a synthetic model draws its latency (and a reflection its verdict) by it."""

    phase: str
    iteration: int


class ChatModel(Protocol):
    """A model the runner can call: the task LM of a rollout, or the reflection LM."""

    model: str

    @property
    def label(self) -> str:
        """The model's name for result.json: never a key, never a URL with credentials."""
        ...

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        clock: Callable[[], float],
        on_failure: Callable[[FailedAttempt], None],
        site: CallSite | None = None,
        **kwargs: Any,
    ) -> tuple[LMReply, int]:
        """(reply, attempts used); raises retry.CallFailed when every attempt failed."""
        ...


def _cost(response: Any) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is not None:
        return float(cost)
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # an unpriced model (a local one): cost unknown
        return None


class LMClient:
    """Calls one model: `pool` routes over local servers (least busy first); otherwise
    `model` is any litellm model string, with `api_base` for a self-hosted endpoint."""

    def __init__(
        self,
        model: str,
        *,
        pool: PoolInfo | None = None,
        api_base: str | None = None,
        policy: RetryPolicy | None = None,
        seed: int = 0,
    ):
        self.model = model
        self.api_base = api_base
        self.pool = pool
        self.policy = policy or RetryPolicy()
        self._rng = random.Random(seed)
        self._seed_lock = threading.Lock()
        self._router = (
            litellm.Router(
                model_list=pool.model_list(),
                routing_strategy="least-busy",
                num_retries=0,  # our retry loop records every attempt
                timeout=self.policy.timeout,
            )
            if pool is not None
            else None
        )

    @property
    def label(self) -> str:
        return f"{self.model} (local llama.cpp pool)" if self._router else self.model

    @property
    def address(self) -> str:
        """Where the calls go, for a person: the URL(s), or the provider's default."""
        if self.pool is not None:
            return ", ".join(s.api_base for s in self.pool.servers)
        return self.api_base or "its provider's default address"

    def _once(
        self, messages: list[dict[str, Any]], kwargs: dict[str, Any], timeout: float
    ) -> LMReply:
        params = dict(kwargs)
        if self._router is not None:
            # llama.cpp's server samples with a fixed seed unless told otherwise: the same
            # prompt would give the same answer at any temperature, so scores would never
            # vary between evaluations. A fresh seed per call restores real sampling.
            with self._seed_lock:
                params.setdefault("seed", self._rng.randrange(2**31))
            response = self._router.completion(
                model=MODEL_ALIAS, messages=messages, timeout=timeout, **params
            )
        else:
            if self.api_base is not None:
                params.setdefault("api_base", self.api_base)
            response = litellm.completion(
                model=self.model,
                messages=messages,
                timeout=timeout,
                num_retries=0,
                max_retries=0,
                **params,
            )
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        return LMReply(
            text=text,
            tokens_in=getattr(usage, "prompt_tokens", None),
            tokens_out=getattr(usage, "completion_tokens", None),
            cost=_cost(response),
        )

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        clock: Callable[[], float],
        on_failure: Callable[[FailedAttempt], None],
        site: CallSite | None = None,
        **kwargs: Any,
    ) -> tuple[LMReply, int]:
        """(reply, attempts used); raises retry.CallFailed when every attempt failed.
        `site` is not sent: what a call is for does not change a real model's answer."""
        timeout = self.policy.timeout
        return call_with_retries(
            lambda: self._once(messages, kwargs, timeout), self.policy, clock, on_failure
        )

    def probe(self, role: str, timeout: float = PROBE_TIMEOUT, tell: Tell = quiet) -> None:
        """One one-token call answered within `timeout` seconds, retries (transient errors,
        at most the policy's attempts) included; else a PxnError naming model and address."""
        tell(f"waiting up to {timeout:g} s for the {role} model {self.model} at {self.address}")
        deadline = time.monotonic() + timeout
        rng = random.Random(0)
        for attempt in range(1, self.policy.max_attempts + 1):
            left = deadline - time.monotonic()
            try:
                self._once([{"role": "user", "content": "Say ok."}], {"max_tokens": 1}, left)
                return
            except Exception as exc:
                if isinstance(exc, litellm.exceptions.Timeout | TimeoutError):
                    break
                pause = self.policy.delay(attempt, rng)
                last = attempt == self.policy.max_attempts
                if not is_transient(exc) or last or time.monotonic() + pause >= deadline:
                    raise PxnError(
                        f"the {role} model {self.model} at {self.address} cannot be reached "
                        f"({describe_error(exc)}); check the model name, the address and "
                        "the key in the environment"
                    ) from None
            time.sleep(pause)  # backoff between tries, as a run's calls do
        raise PxnError(
            f"of {timeout:g} s passed with no answer from the {role} model {self.model} at "
            f"{self.address}; check the address, or allow a slow model more time",
            subject="probe timeout",
        )
