"""Acceptance: the chance that a child beats its parent on their minibatch.

A constant a0, or a decay a(i) = a0 exp(-min(i, decay_until) / tau) over the
i proposals made before the iteration. A decay fitted on a short run holds at
`decay_until` (the span it was fitted on) rather than run on to zero.

Siblings share their parents, minibatches and moment in the run, so they tend
to succeed or fail together: with `correlation` rho > 0 an iteration's rate
is drawn from a Beta of mean a and within-iteration correlation rho (the
beta-binomial model), its k proposals accepted independently at that rate.

`batched` is a batched iteration's (k > 1) acceptance over a single one's: its
proposals meet the same (parent, minibatch) pairs more often.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pxn.errors import PxnError
from pxn.fields import at_least, is_number, share, table


@dataclass(frozen=True)
class Acceptance:
    a0: float
    tau: float | None = None  # proposals; None: constant
    decay_until: float | None = None  # proposals; None: the decay runs on
    correlation: float = 0.0  # rho, within an iteration
    batched: float = 1.0  # a batched iteration's acceptance over a single one's

    def for_width(self, k: int) -> Acceptance:
        """The acceptance of a run whose iterations propose k at once (a0 scaled when k > 1)."""
        if k == 1 or self.batched == 1:
            return self
        return replace(self, a0=min(1.0, self.a0 * self.batched), batched=1.0)

    def probability(self, proposals_made: float | np.ndarray) -> float | np.ndarray:
        """The mean acceptance of an iteration that starts after this many proposals."""
        if self.tau is None:
            return self.a0
        if not isinstance(proposals_made, np.ndarray):  # one iteration: math beats numpy
            made = float(proposals_made)
            if self.decay_until is not None:
                made = min(made, self.decay_until)
            return self.a0 * math.exp(-made / self.tau)
        made = proposals_made.astype(float)
        if self.decay_until is not None:
            made = np.minimum(made, self.decay_until)
        return self.a0 * np.exp(-made / self.tau)

    def step_rate(self, rng: np.random.Generator, proposals_made: float) -> float:
        """This iteration's acceptance rate: its mean, or a Beta draw around it when correlated."""
        a = self.probability(proposals_made)
        if self.correlation == 0 or a in (0.0, 1.0):
            return a
        spread = 1 / self.correlation - 1  # alpha + beta
        return float(rng.beta(a * spread, (1 - a) * spread))

    def validate(self) -> None:
        share(self.a0, "acceptance a0")
        if self.tau is not None and not (is_number(self.tau) and self.tau > 0):
            raise PxnError(f"must be > 0 proposals: got {self.tau!r}", subject="acceptance tau")
        if self.decay_until is not None:
            if self.tau is None:
                raise PxnError("needs tau (a decay to stop)", subject="acceptance decay_until")
            at_least(self.decay_until, "acceptance decay_until")
        share(self.correlation, "acceptance correlation", top_open=True)
        if not (is_number(self.batched) and self.batched > 0):
            raise PxnError(f"must be > 0: got {self.batched!r}", subject="acceptance batched")
        if self.a0 * self.batched > 1:
            raise PxnError(
                f"{self.batched:g} x a0 {self.a0:g} = {self.a0 * self.batched:g} is a "
                "batched iteration's acceptance, which must be at most 1",
                subject="acceptance batched",
            )

    def to_dict(self) -> dict[str, Any]:
        """a0, and each other field unless at its default."""
        fields = self.__dataclass_fields__.values()
        return {f.name: v for f in fields if (v := getattr(self, f.name)) != f.default}

    @classmethod
    def from_dict(cls, data: Any) -> Acceptance:
        fields = table(data, "[acceptance]", set(cls.__dataclass_fields__))
        if "a0" not in fields:
            raise PxnError("needs a0 (and optionally tau, decay_until, correlation, batched)",
                           subject="[acceptance]")  # fmt: skip
        bad = [k for k, v in fields.items() if not is_number(v)]
        if bad:
            raise PxnError(f"{bad[0]} must be a number: got {fields[bad[0]]!r}",
                           subject="[acceptance]")  # fmt: skip
        return cls(**{k: float(v) for k, v in fields.items()})
