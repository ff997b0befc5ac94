"""The shape of an iteration, P x N, as every command spells it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pxn.errors import PxnError


@dataclass(frozen=True, order=True)
class Shape:
    """P parents per iteration, N proposals from each: k = P * N proposals per iteration."""

    p: int
    n: int

    @property
    def k(self) -> int:
        return self.p * self.n

    @property
    def label(self) -> str:
        return "single" if self.k == 1 else f"{self.p}x{self.n}"

    def __str__(self) -> str:
        return f"{self.p}x{self.n}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        """'single', or 'PxN' with P, N >= 1 ('2x4', '2 x 4', '2X4')."""
        clean = text.strip().lower()
        if clean == "single":
            return cls(1, 1)
        match = re.fullmatch(r"(\d+)\s*x\s*(\d+)", clean)
        if not match:
            raise PxnError(f"is 'PxN' (like 2x4) or 'single': got {text!r}", subject="shape")
        p, n = int(match[1]), int(match[2])
        if p < 1 or n < 1:
            raise PxnError(f"needs P, N >= 1 (P x N): got {text!r}", subject="shape")
        return cls(p, n)


def parse_shapes(text: str) -> list[Shape]:
    """Comma-separated shapes, each once ('single,2x2'; 'single,1x1' names one twice)."""
    shapes = [Shape.parse(part) for part in text.split(",") if part.strip()]
    if not shapes:
        raise PxnError("name at least one shape, like single,2x2", subject="shapes")
    repeated = sorted({s.label for s in shapes if shapes.count(s) > 1})
    if repeated:
        raise PxnError(f"name each shape once: {', '.join(repeated)} twice", subject="shapes")
    return shapes
