"""The GEPAConfig a recorded optimize_anything run gets: the user's, with the recorder's parts.

optimize_anything takes what gepa.optimize takes as arguments from its
config, so the recorder's parts go there: the callbacks first among the
config's callbacks, the stoppers (the user's watched, the recorder's last),
the selection, the reflection LM, the run_dir. The user's config is left as
it was (optimize_anything writes into the config it is given: defaults, the
LM it makes from a model name): each part changed is a copy.

The refiner (RefinerConfig) uses the reflection LM when it names none:
gepa takes the reflection LM as the user gave it, before it makes a model
name into an LM. The copy names that LM for the refiner, so refinements run
on the LM they would have run on, and are not taken for reflections.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gepa.optimize_anything import GEPAConfig


@dataclass(frozen=True)
class RecordedParts:
    """What the recording puts into a run (gepa.optimize's arguments, or the config)."""

    run_dir: str
    callbacks: list[Any]
    stop_callbacks: list[Any]
    selection_strategy: Any
    reflection_lm: Any  # the recorded reflection LM, or None (none was given)
    resumed: bool = False  # gepa continues a saved state: its seed's validation is skipped


def recorded_config(config: GEPAConfig | None, parts: RecordedParts) -> GEPAConfig:
    config = config or GEPAConfig()
    given_lm = config.reflection.reflection_lm
    reflection = config.reflection
    if parts.reflection_lm is not None:
        # reflection_lm_kwargs made the recorded LM already (a model name), as gepa would.
        reflection = replace(
            reflection, reflection_lm=parts.reflection_lm, reflection_lm_kwargs=None
        )
    else:
        reflection = replace(reflection)
    refiner = config.refiner
    if refiner is not None:
        refiner = replace(refiner, refiner_lm=refiner.refiner_lm or given_lm)
    return replace(
        config,
        engine=replace(
            config.engine, run_dir=parts.run_dir, selection_strategy=parts.selection_strategy
        ),
        reflection=reflection,
        tracking=replace(config.tracking),
        merge=None if config.merge is None else replace(config.merge),
        refiner=refiner,
        callbacks=parts.callbacks,
        stop_callbacks=parts.stop_callbacks,
    )
