"""run_start from `gepa.optimize`'s arguments (or those optimize_anything's stand for): sizes,
shape, budget, W, C, seed, the merge's setup and the names of the parts; no argument's value
beyond those (keys in `reflection_lm_kwargs` never reach it).

meta's `not_modelled` holds one line for each part of the run the simulator
does not model (an adapter evaluated pair after pair, say). C, when not
given, is what gepa does with the reflection LM: one at a time for an
adapter that proposes or an LM without `batch_complete`, gepa's thread cap
for a model string, else every prompt of an iteration at once.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import sys
from typing import Any

from gepa.strategies.proposal_selection import AllImprovements

from pxn.runner.recording.lm_wrapper import GEPA_LM_BATCH_WORKERS
from pxn.trace import RunStart


def run_start(
    kwargs: dict[str, Any],
    lm: Any,
    *,
    workers: int | None,
    reflection_concurrency: int | None,
    meta: dict[str, Any],
) -> RunStart:
    """`kwargs`: gepa.optimize's; `lm`: the wrapped reflection LM (None: none given);
    `workers`, `reflection_concurrency`: as declared (None: not declared)."""
    shape = gepa_shape(kwargs.get("sampling_strategy"))
    trainset = kwargs["trainset"]
    valset = kwargs.get("valset")
    valset = trainset if valset is None else valset
    selection = kwargs.get("selection_strategy") or AllImprovements()
    adapter = kwargs.get("adapter")
    own: dict[str, Any] = {}
    if adapter is not None:
        own["adapter"] = type(adapter).__name__
        if not hasattr(adapter, "batch_evaluate"):
            own["evaluates"] = "pair_by_pair"
            own["not_modelled"] = [PAIR_BY_PAIR]
    return RunStart(
        start=0.0,
        end=0.0,
        source="runner",
        shape=shape,
        budget=int(kwargs.get("max_metric_calls") or 0),
        # 0: not declared; run_end then holds the most rollouts seen in flight.
        workers=workers or 0,
        reflection_concurrency=reflection_concurrency or _reflection_slots(adapter, lm, shape),
        valset_size=len(valset),
        trainset_size=len(trainset),
        minibatch=int(kwargs.get("reflection_minibatch_size") or 3),
        seed=int(kwargs.get("seed", 0)),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        meta={
            **merge_setup(kwargs),
            "selection": _selection_name(selection),
            **own,
            "reflection_lm": _lm_label(kwargs.get("reflection_lm")),
            "gepa": importlib.metadata.version("gepa"),
            "python": sys.version.split()[0],
            **meta,
        },
    )


PAIR_BY_PAIR = (
    "the adapter has no batch_evaluate, so gepa evaluates a stage's candidates one after "
    "another; the simulator pools W across them, so a batched shape's stages are predicted "
    "shorter than they run"
)


def merge_setup(kwargs: dict[str, Any]) -> dict[str, Any]:
    """gepa.optimize's merge arguments, at gepa 0.1.4's defaults when not given."""
    return {
        "use_merge": bool(kwargs.get("use_merge", False)),
        "max_merge_invocations": int(kwargs.get("max_merge_invocations", 5)),
        "components": len(kwargs.get("seed_candidate") or {}),
    }


def gepa_shape(sampling: Any) -> str:
    """PxN of gepa's sampling strategy (1x1 for gepa's default single proposal)."""
    p, n = getattr(sampling, "p", None), getattr(sampling, "n", None)
    name = type(sampling).__name__
    if name == "SameParentSampling":
        return f"1x{n}"
    if name == "IndependentSampling":
        return f"{n}x1"
    if p is not None and n is not None:
        return f"{p}x{n}"
    return "1x1"


def _reflection_slots(adapter: Any, lm: Any, shape: str) -> int:
    proposes = getattr(adapter, "propose_new_texts", None) is not None
    if proposes or lm is None or not hasattr(lm, "batch_complete"):
        return 1
    p, n = (int(x) for x in shape.split("x"))
    if type(lm.inner).__name__ == "MeteredLM":
        return min(p * n, GEPA_LM_BATCH_WORKERS)
    return p * n


def _selection_name(selection: Any) -> str:
    name = type(selection).__name__
    if name == "TopKImprovements":
        return f"topk:{selection.k}"
    return {"AllImprovements": "all", "BestImprovement": "best"}.get(name, name)


def _lm_label(lm: Any) -> str | None:
    if lm is None:
        return None
    return lm if isinstance(lm, str) else getattr(lm, "label", None) or type(lm).__name__
