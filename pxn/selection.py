"""gepa's selection strategy: which accepted children of an iteration go to full validation.

`all` (gepa's AllImprovements, its default), `best` (BestImprovement: the one
child that improved most) or `topk:K` (TopKImprovements(K)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pxn.errors import PxnError


@dataclass(frozen=True)
class Selection:
    kind: str  # all | best | topk
    k: int | None = None  # K, for topk

    @property
    def limit(self) -> int | None:
        """How many accepted children of an iteration go to full validation (None: all)."""
        return {"all": None, "best": 1}.get(self.kind, self.k)

    def __str__(self) -> str:
        return f"topk:{self.k}" if self.kind == "topk" else self.kind

    @classmethod
    def parse(cls, text: str) -> Selection:
        clean = text.strip().lower()
        if clean in ("all", "best"):
            return cls(clean)
        match = re.fullmatch(r"topk:(\d+)", clean)
        if match and int(match[1]) >= 1:
            return cls("topk", int(match[1]))
        raise PxnError(f"is all, best or topk:K with K >= 1: got {text!r}", subject="selection")
