"""How a candidate's prompt length scales its rollouts' latency ([prompt] in TOML).

gepa's reflection rewrites a candidate's instruction, and the new text may be
much longer or shorter than the seed's. A rollout reads the whole prompt, so
where latency grows with the prompt (a local server prefilling it, a hosted
model's time to first token) the candidates a run happens to accept set how
long its rollouts take, and one run's latency does not carry to the next.

A rollout of a candidate whose prompt is `length` times the seed's takes
`length ** exponent` times the latency drawn for it (the seed's). Each
proposal's length is drawn from `lengths`, the proposals' lengths the
calibration runs showed, whatever its parent's: the reflection LM writes a
whole new instruction at its own length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pxn.errors import PxnError
from pxn.fields import is_number, required_table

MAX_EXPONENT = 3.0  # beyond cubic in the prompt, no LM's latency grows


@dataclass(frozen=True)
class PromptLengths:
    exponent: float  # latency ~ length ** exponent
    lengths: tuple[float, ...]  # proposals' prompt lengths, relative to the seed's

    def factor(self, length: float) -> float:
        """A rollout's latency, relative to the seed's, at this prompt length."""
        return length**self.exponent

    def validate(self) -> PromptLengths:
        if not (math.isfinite(self.exponent) and 0.0 <= self.exponent <= MAX_EXPONENT):
            raise PxnError(
                f"must be in [0, {MAX_EXPONENT:g}]: got {self.exponent}", subject="prompt.exponent"
            )
        if not self.lengths or not all(math.isfinite(x) and x > 0 for x in self.lengths):
            raise PxnError(
                "must be a non-empty list of positive lengths (a proposal's prompt over the "
                "seed's)",
                subject="prompt.lengths",
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"exponent": self.exponent, "lengths": list(self.lengths)}

    @classmethod
    def from_dict(cls, data: Any) -> PromptLengths:
        names = sorted(cls.__dataclass_fields__)
        fields = required_table(data, set(names), names, "[prompt]")
        lengths, exponent = fields["lengths"], fields["exponent"]
        if not isinstance(lengths, list) or not all(is_number(x) for x in lengths):
            raise PxnError("must be a list of numbers", subject="prompt.lengths")
        if not is_number(exponent):
            raise PxnError(f"must be a number: got {exponent!r}", subject="prompt.exponent")
        return cls(float(exponent), tuple(float(x) for x in lengths)).validate()
