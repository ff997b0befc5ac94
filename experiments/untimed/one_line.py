"""The one line, as a user adds it to their gepa.optimize call: the study's scripts share it.

`record` runs gepa.optimize inside `with recording(out, workers=W) as rec`,
its keyword arguments through `rec.wrap`, and returns the run's totals as
`rec.result` holds them. `make_adapter(rec)` builds the adapter (a timed one
times its rollouts with `rec.rollout`); its thread pool is shut down after
the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gepa
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.runner.record import Recording, recording
from pxn.shape import Shape


def record(
    out: Path,
    workers: int,
    shape: Shape,
    seed: int,
    budget: int,
    make_adapter: Callable[[Recording], Any],
    **gepa_kwargs: Any,
) -> dict:
    with recording(out, workers=workers) as rec:
        adapter = make_adapter(rec)
        gepa.optimize(
            **rec.wrap(
                adapter=adapter,
                max_metric_calls=budget,
                sampling_strategy=PxNSampling(shape.p, shape.n),
                seed=seed,
                display_progress_bar=False,
                **gepa_kwargs,
            )
        )
    adapter.pool.shutdown()
    return dataclasses.asdict(rec.result)
