"""What a scenario does not know exactly: a set of parameter draws.

A scenario calibrated from a few runs, or inferred from a paper's few
numbers, knows its parameters only up to an uncertainty. It carries that as
draws: each a set of parameter values, named by their path in the scenario
("rollout.scale", "acceptance.a0", "load.task.slowdown",
"rollout.phases.full_val.s", "stage_overhead"), that replace the point
estimate's. A prediction runs replicate r with draw r mod D, so its interval
spans the parameters and the run-to-run noise together, and the share of the
spread each explains can be told apart (law of total variance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pxn.errors import PxnError
from pxn.fields import is_number, table


@dataclass(frozen=True)
class Uncertainty:
    source: str  # how the draws were made, in a sentence
    draws: tuple[dict[str, float], ...]

    def __len__(self) -> int:
        return len(self.draws)

    def draw_of(self, replicate: int) -> dict[str, float]:
        return self.draws[replicate % len(self.draws)]

    @property
    def parameters(self) -> list[str]:
        return sorted({path for draw in self.draws for path in draw})

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "draws": [dict(d) for d in self.draws]}

    @classmethod
    def from_dict(cls, data: Any) -> Uncertainty:
        fields = table(data, "[uncertainty]")
        draws = fields.get("draws")
        if not isinstance(draws, list) or not draws:
            raise PxnError("needs a non-empty list of [[uncertainty.draws]]",
                           subject="[uncertainty]")  # fmt: skip
        for i, draw in enumerate(draws, start=1):
            if not isinstance(draw, dict) or not draw:
                raise PxnError(f"draw {i} is not a table of parameter values",
                               subject="[uncertainty]")  # fmt: skip
            bad = [k for k, v in draw.items() if not (is_number(v) and math.isfinite(v))]
            if bad:
                raise PxnError(f"draw {i}: {bad[0]} must be a finite number",
                               subject="[uncertainty]")  # fmt: skip
        source = str(fields.get("source", ""))
        return cls(source, tuple({k: float(v) for k, v in d.items()} for d in draws))
