"""`run`: a real batched gepa 0.1.4 run of a built-in task (or module:function), traced,
as `pxn run` makes it: on the local LM pool by default, or on any litellm model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from pxn.errors import PxnError
from pxn.runner.waits import PROBE_TIMEOUT

if TYPE_CHECKING:
    from pxn.runner.run import RunResult


# RunConfig's fields are run's keywords, these named otherwise.
CONFIG_FIELDS = {
    "task_model": "task_lm",
    "reflection_model": "reflection_lm",
    "lm_servers": "servers",
    "backend": "eval_backend",
    "address": "ray_address",
}


def run(
    out: str | Path | None = None,
    *,
    task: str | None = None,
    shape: str = "1x1",
    budget: int | str = 40,
    workers: int = 2,
    selection: str = "all",
    minibatch: int | None = None,
    task_model: str | None = None,
    reflection_model: str | None = None,
    api_base: str | None = None,
    reflection_concurrency: int | None = None,
    seed: int = 0,
    lm_servers: int = 2,
    backend: str = "local",
    address: str | None = None,
    merge: bool = False,
    max_merges: int = 5,
    api: str = "gepa.optimize",
    resume: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    probe_timeout: float = PROBE_TIMEOUT,
) -> RunResult:
    """Run gepa for real into a new directory `out` (trace.jsonl, result.json), or continue
    the interrupted run in `resume`; the other keywords are `pxn run`'s flags (its --help
    says each). The result's status is completed, interrupted, failed, or finished (a
    resumed run that had nothing left to do). Bad flags are refused before anything starts."""
    asked = dict(locals())  # first, while the keywords are all that is local
    from pxn.runner.config import RunConfig, check_out, plan

    if resume is None and out is None:
        raise PxnError(
            "give a directory for the new run (out, e.g. runs/NAME), or the interrupted run's "
            "to continue (resume)"
        )
    if not 0 < probe_timeout < math.inf:
        raise PxnError(f"must be seconds > 0, got {probe_timeout}", subject="probe timeout")
    for how_it_starts in ("resume", "overwrite", "probe_timeout"):
        del asked[how_it_starts]
    fields = {CONFIG_FIELDS.get(key, key): value for key, value in asked.items()}
    config = RunConfig(**fields | {"out": str(resume or out)})
    if resume is None:  # bad flags fail now, before litellm's slow import
        if not overwrite:
            check_out(config, resume=False)
        plan(config)
    from pxn.runner.run import run_gepa

    return run_gepa(
        config, resume=resume is not None, overwrite=overwrite, probe_timeout=probe_timeout
    )
