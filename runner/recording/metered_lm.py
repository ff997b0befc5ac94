"""gepa's own litellm LM, telling each call's tokens and cost (gepa's keeps only totals)."""

from __future__ import annotations

import threading
from typing import Any

from gepa.lm import LM

# gepa's LM.batch_complete default: litellm.batch_completion's max_workers.
GEPA_LM_BATCH_WORKERS = 10


class MeteredLM(LM):
    """gepa's own litellm LM (what gepa builds from a model string), telling each call's tokens
    and cost: gepa's LM only keeps totals, so the increments it adds under its lock are
    noted per thread, and every call runs on its own thread (`batch_complete` below)."""

    def __init__(self, model: str, **kwargs: Any):
        self._local = threading.local()
        super().__init__(model, **kwargs)

    def usage(self) -> tuple[int, int, float]:
        """Tokens in, out and cost added on this thread since the last `usage()` call."""
        got = getattr(self._local, "got", (0, 0, 0.0))
        self._local.got = (0, 0, 0.0)
        return got

    def _note(self, position: int, delta: float) -> None:
        got = list(getattr(self._local, "got", (0, 0, 0.0)))
        got[position] += delta
        self._local.got = tuple(got)

    @property  # type: ignore[override]
    def _total_tokens_in(self) -> int:
        return self.__dict__.get("_tin", 0)

    @_total_tokens_in.setter
    def _total_tokens_in(self, value: int) -> None:
        self._note(0, value - self.__dict__.get("_tin", 0))
        self.__dict__["_tin"] = value

    @property  # type: ignore[override]
    def _total_tokens_out(self) -> int:
        return self.__dict__.get("_tout", 0)

    @_total_tokens_out.setter
    def _total_tokens_out(self, value: int) -> None:
        self._note(1, value - self.__dict__.get("_tout", 0))
        self.__dict__["_tout"] = value

    @property  # type: ignore[override]
    def _total_cost(self) -> float:
        return self.__dict__.get("_cost", 0.0)

    @_total_cost.setter
    def _total_cost(self, value: float) -> None:
        self._note(2, value - self.__dict__.get("_cost", 0.0))
        self.__dict__["_cost"] = value
