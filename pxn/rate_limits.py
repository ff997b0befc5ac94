"""A hosted provider's rate limits: requests and tokens per minute, per model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pxn.errors import PxnError
from pxn.fields import is_number, table
from pxn.prices import ROLES


@dataclass(frozen=True)
class RateLimit:
    """A provider's limits on one model: requests and tokens per minute (None: no limit)."""

    rpm: float | None = None
    tpm: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in (("rpm", self.rpm), ("tpm", self.tpm)) if v is not None}


@dataclass(frozen=True)
class RateLimits:
    """Rate limits on the task model (rollouts) and the reflection model.

    Each limit is a token bucket that holds `burst_seconds` worth of its
    per-minute allowance and refills continuously; a call waits until its
    bucket can pay for it, as a client that backs off on 429s ends up doing.
    The two models' buckets are separate (two models, or two API keys).
    """

    task: RateLimit = RateLimit()
    reflection: RateLimit = RateLimit()
    burst_seconds: float = 60.0

    def of(self, role: str) -> RateLimit:
        return self.task if role == "task" else self.reflection

    @property
    def limited(self) -> bool:
        """Whether any model has a limit (burst_seconds alone limits nothing)."""
        return bool(self.task.to_dict() or self.reflection.to_dict())

    def validate(self, has_tokens: bool) -> None:
        for role in ROLES:
            limit = self.of(role)
            for name, value in (("rpm", limit.rpm), ("tpm", limit.tpm)):
                if value is not None and not (is_number(value) and value > 0):
                    raise PxnError(f"must be > 0 per minute: got {value!r}",
                                   subject=f"rate_limits.{role}.{name}")  # fmt: skip
            if limit.tpm is not None and not has_tokens:
                raise PxnError(
                    "counts tokens: the scenario needs a [tokens] table (pxn calibrate writes "
                    "one from traces with token counts)",
                    subject=f"rate_limits.{role}.tpm",
                )
        if not (is_number(self.burst_seconds) and self.burst_seconds > 0):
            raise PxnError(f"must be > 0: got {self.burst_seconds!r}",
                           subject="rate_limits.burst_seconds")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        tables = {role: self.of(role).to_dict() for role in ROLES}
        return {"burst_seconds": self.burst_seconds} | {k: v for k, v in tables.items() if v}

    @classmethod
    def from_dict(cls, data: Any) -> RateLimits:
        fields = table(data, "[rate_limits]", {*ROLES, "burst_seconds"})
        limits = (
            RateLimit(**table(fields.get(role, {}), f"[rate_limits.{role}]", {"rpm", "tpm"}))
            for role in ROLES
        )
        return cls(*limits, fields.get("burst_seconds", 60.0))
