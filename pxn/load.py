"""Latency under load, per model: how many calls it serves at once, and how it slows.

A local LM pool of K single-request servers serves K calls at once and, sharing
a CPU, each call is slower the more are served; a hosted API slows under
concurrency too. Each model (task: the rollouts; reflection) has its own
`servers` (None: no limit beyond W or C) and `slowdown` beta: a call that starts
while m calls of its model are in flight (itself included) takes 1 + beta (m - 1)
times its sampled latency. A barrier separates rollouts from reflections in
gepa, so one model's load never meets the other's.

A server that keeps its last prompt's cached prefix (llama.cpp) serves a
reflection faster right after a sibling (same parent, same iteration: the same
template and parent text). `prefix_seconds` (reflections only, servers
required) is what that saves; the sampled latency is shortened by it (floored
at 0) before the load factor. Singles never send two reflections of one
iteration, so their predictions are unchanged.

A run's own conditions (the provider's load that hour, what else the machine
runs) make all its calls faster or slower together. `run_spread` is their
log-sd per model: each run draws one standard normal z, and every call takes
exp(run_spread z - run_spread^2 / 2) times its sampled latency (mean 1, so
means and the closed form are unchanged). Both models take the same z: where
conditions reach only one, this overstates how runs differ rather than
understating it. The factor applies before the prefix cache and the load.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from pxn.errors import PxnError
from pxn.fields import at_least, table, whole
from pxn.prices import ROLES

RUN_SPREAD_MAX = 1.0


@dataclass(frozen=True)
class Load:
    servers: int | None = None
    slowdown: float = 0.0
    prefix_seconds: float = 0.0  # saved by a reflection whose server just served a sibling
    run_spread: float = 0.0  # log-sd of a run's own speed factor (mean 1)

    def slots(self, cap: int) -> int:
        """Calls served at once under a cap of its own (W, or C)."""
        return cap if self.servers is None else min(cap, self.servers)

    def factor(self, in_flight: int) -> float:
        """What a call's sampled latency is multiplied by with `in_flight` calls served."""
        return 1 + self.slowdown * (in_flight - 1)

    def run_factor(self, z: float) -> float:
        """What every call's sampled latency is multiplied by in a run whose conditions drew z."""
        return math.exp(self.run_spread * z - self.run_spread**2 / 2)

    def validate(self, role: str) -> None:
        if self.servers is not None:
            whole(self.servers, f"load.{role}.servers")
        at_least(self.slowdown, f"load.{role}.slowdown")
        at_least(self.prefix_seconds, f"load.{role}.prefix_seconds")
        if not (at_least(self.run_spread, f"load.{role}.run_spread") <= RUN_SPREAD_MAX):
            factor = math.exp(RUN_SPREAD_MAX)
            raise PxnError(
                f"must be at most {RUN_SPREAD_MAX:g} (a log-sd: runs {factor:.1f} times slower "
                f"or faster at one sd): got {self.run_spread!r}",
                subject=f"load.{role}.run_spread",
            )
        if self.prefix_seconds and role != "reflection":
            raise PxnError(
                "a prompt-prefix cache is modelled for reflections only (a rollout's measured "
                "latency already includes it); remove the key",
                subject=f"load.{role}.prefix_seconds",
            )
        if self.prefix_seconds and self.servers is None:
            raise PxnError(
                f"needs load.{role}.servers: the cache is a server's, reused by the next "
                "call that server serves; set servers",
                subject=f"load.{role}.prefix_seconds",
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields set (servers >= 1 when set, so only what is unset is left out)."""
        return {name: value for name, value in asdict(self).items() if value}

    @classmethod
    def from_dict(cls, data: Any, role: str) -> Load:
        return cls(**table(data, f"[load.{role}]", set(cls.__dataclass_fields__)))


@dataclass(frozen=True)
class Loads:
    task: Load = Load()
    reflection: Load = Load()

    def of(self, role: str) -> Load:
        return self.task if role == "task" else self.reflection

    def validate(self) -> None:
        for role in ROLES:
            self.of(role).validate(role)

    def to_dict(self) -> dict[str, Any]:
        return {role: d for role in ROLES if (d := self.of(role).to_dict())}

    @property
    def varies_by_run(self) -> bool:
        """Whether a run's own conditions spread its calls' latencies (either model)."""
        return bool(self.task.run_spread or self.reflection.run_spread)

    @classmethod
    def from_dict(cls, data: Any) -> Loads:
        fields = table(data, "[load]", set(ROLES))
        return cls(*(Load.from_dict(fields.get(role, {}), role) for role in ROLES))
