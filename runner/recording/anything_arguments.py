"""optimize_anything's arguments: told from gepa.optimize's, checked, and read as the
gepa.optimize run they stand for.

gepa.optimize's arguments have a trainset (or an adapter, or a task_lm);
optimize_anything's have none of these. Its modes are which data it is given:
single-task (no dataset: gepa's sets are one placeholder example, b is 1),
multi-task (a dataset, also the valset), generalization (a dataset and a
valset). `gepa_view` reads them as the gepa.optimize run the engine makes, so
run_start, the labels and the budget checks are every recorded run's.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import replace
from typing import Any

from gepa.optimize_anything import (
    _SINGLE_INSTANCE_SENTINEL,
    _STR_CANDIDATE_KEY,
    GEPAConfig,
    optimize_anything,
)

from pxn.errors import PxnError
from pxn.fields import whole
from pxn.runner.recording.arguments import check_budget_after_seed, check_callbacks

GEPA_OPTIMIZE_ONLY = ("trainset", "adapter", "task_lm")
ANYTHING_ONLY = ("dataset", "config", "batch_evaluator", "objective", "background")


def is_optimize_anything(kwargs: dict[str, Any]) -> bool:
    """Whether `rec.wrap`'s arguments are optimize_anything's (else gepa.optimize's)."""
    if any(name in kwargs for name in GEPA_OPTIMIZE_ONLY):
        return False
    return any(name in kwargs for name in ANYTHING_ONLY) or "evaluator" in kwargs


def check_anything_arguments(kwargs: dict[str, Any]) -> None:
    """optimize_anything's keyword arguments, as far as the recording and a usable trace need."""
    known = list(inspect.signature(optimize_anything).parameters)
    for name in kwargs:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PxnError(f"is not an argument of optimize_anything{hint}", subject=name)
    evaluator, batch = kwargs.get("evaluator"), kwargs.get("batch_evaluator")
    if evaluator is None and batch is None:
        raise PxnError(
            "is needed (or batch_evaluator): the function that scores a candidate",
            subject="evaluator",
        )
    for name, part in (("evaluator", evaluator), ("batch_evaluator", batch)):
        if part is not None and not callable(part):
            raise PxnError(f"must be a function: got {type(part).__name__}", subject=name)
    _check_seed(kwargs.get("seed_candidate"))
    for name in ("dataset", "valset"):
        data = kwargs.get(name)
        if data is not None and (isinstance(data, str | bytes) or not hasattr(data, "__len__")):
            raise PxnError(f"must be a list of examples: got {type(data).__name__}", subject=name)
        if data is not None and len(data) == 0:
            raise PxnError("is empty: give at least one example, or None", subject=name)
    config = kwargs.get("config")
    if config is not None and not isinstance(config, GEPAConfig):
        raise PxnError(f"must be a GEPAConfig: got {type(config).__name__}", subject="config")
    valset = kwargs.get("valset")
    size = len(valset) if valset is not None else len(trainset(kwargs))
    _check_config(config or GEPAConfig(), size)


def _check_seed(seed: Any) -> None:
    if seed is None:
        raise PxnError(
            "is needed: gepa's seedless mode writes the seed with the reflection LM before its "
            "loop, which the recording does not cover; pass the text (or dict of texts) to start "
            "from",
            subject="seed_candidate",
        )
    if isinstance(seed, str):
        return
    if not isinstance(seed, dict) or not seed or not all(isinstance(v, str) for v in seed.values()):
        raise PxnError(
            f"must be a text, or a dict of component name -> text, at least one: got {seed!r}",
            subject="seed_candidate",
        )


def _check_config(config: GEPAConfig, valset_size: int) -> None:
    engine = config.engine
    if engine.cache_evaluation:
        raise PxnError(
            "answers a (candidate, example) it has seen without calling the evaluator, and gepa "
            "still counts it as a metric call: the trace would time the cache; set it False to "
            "measure what the run costs",
            subject="config.engine.cache_evaluation",
        )
    stops = (
        engine.max_metric_calls,
        engine.max_candidate_proposals,
        engine.max_reflection_cost,
        config.stop_callbacks,
    )
    if all(s is None or s == [] for s in stops):
        raise PxnError(
            "is needed (or max_candidate_proposals, max_reflection_cost, or the config's "
            "stop_callbacks): gepa needs a stopping condition",
            subject="config.engine.max_metric_calls",
        )
    budget = engine.max_metric_calls
    if budget is not None:
        check_budget_after_seed(budget, valset_size, "config.engine.max_metric_calls")
    if engine.max_candidate_proposals is not None:
        whole(engine.max_candidate_proposals, "config.engine.max_candidate_proposals")
    if engine.parallel and engine.max_workers is not None:
        whole(engine.max_workers, "config.engine.max_workers")
    minibatch = config.reflection.reflection_minibatch_size
    if minibatch is not None:
        whole(minibatch, "config.reflection.reflection_minibatch_size")
    check_callbacks(config.callbacks, "config.callbacks")
    if (
        config.reflection.reflection_lm is None
        and config.reflection.custom_candidate_proposer is None
    ):
        raise PxnError(
            "is needed: a model name, a callable or an object with batch_complete",
            subject="config.reflection.reflection_lm",
        )
    if config.refiner is not None:
        whole(config.refiner.max_refinements, "config.refiner.max_refinements")


def single_task(kwargs: dict[str, Any]) -> bool:
    return kwargs.get("dataset") is None and kwargs.get("valset") is None


def trainset(kwargs: dict[str, Any]) -> list[Any]:
    """gepa's trainset as optimize_anything hands it to the engine."""
    if single_task(kwargs):
        return [_SINGLE_INSTANCE_SENTINEL]
    dataset = kwargs.get("dataset")
    return dataset if dataset is not None else [None]


def seed_texts(kwargs: dict[str, Any]) -> dict[str, str]:
    """The seed candidate as gepa's engine gets it: a text is one component, and the refiner
    adds its prompt as one more."""
    seed = kwargs["seed_candidate"]
    texts = {_STR_CANDIDATE_KEY: seed} if isinstance(seed, str) else dict(seed)
    config = kwargs.get("config") or GEPAConfig()
    if config.refiner is not None:
        texts.setdefault("refiner_prompt", "")
    return texts


def gepa_view(kwargs: dict[str, Any]) -> dict[str, Any]:
    """optimize_anything's arguments as the gepa.optimize arguments of the run its engine makes:
    what run_start, the rollouts' labels and the resume check read (no adapter: gepa builds
    it inside)."""
    config = kwargs.get("config") or GEPAConfig()
    engine, reflection = config.engine, config.reflection
    minibatch = reflection.reflection_minibatch_size or (1 if single_task(kwargs) else 3)
    return {
        "seed_candidate": seed_texts(kwargs),
        "trainset": trainset(kwargs),
        "valset": kwargs.get("valset"),
        "adapter": None,
        "reflection_lm": reflection.reflection_lm,
        "reflection_lm_kwargs": reflection.reflection_lm_kwargs,
        "reflection_minibatch_size": minibatch,
        "sampling_strategy": engine.sampling_strategy,
        "selection_strategy": engine.selection_strategy,
        "max_metric_calls": engine.max_metric_calls,
        "max_reflection_cost": engine.max_reflection_cost,
        "max_candidate_proposals": engine.max_candidate_proposals,
        "stop_callbacks": config.stop_callbacks,
        "callbacks": config.callbacks,
        "run_dir": engine.run_dir,
        "seed": engine.seed,
        "use_merge": config.merge is not None,
        "max_merge_invocations": config.merge.max_merge_invocations if config.merge else 5,
    }


def workers_of(kwargs: dict[str, Any]) -> int | None:
    """W as optimize_anything runs the evaluator: EngineConfig.max_workers threads when parallel,
    one at a time when not; None when unknown (a batch_evaluator's own concurrency, or an
    unbounded pool)."""
    config = kwargs.get("config") or GEPAConfig()
    if kwargs.get("batch_evaluator") is not None and config.refiner is None:
        return None
    return config.engine.max_workers if config.engine.parallel else 1


# What the simulator does not model of an optimize_anything run, one line each (calibration
# says them): run_start's meta `not_modelled`.
REFINER = (
    "RefinerConfig: a rollout is an example's whole evaluate-refine loop, and gepa counts each "
    "evaluation of a minibatch's loop against the budget; the simulator draws one rollout per "
    "example and counts one, so it runs more iterations per budget than gepa"
)
SINGLE_TASK = (
    "single-task search (no dataset): one example, scored on the evaluator's own scale; the "
    "quality model needs several examples scored in [0, 1], so the search and the best score "
    "are not predicted for it, its time is"
)


def anything_meta(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What run_start's meta says of an optimize_anything run: the API, its mode and evaluator,
    the engine's parallelism, its refiner and proposal cap, and what the simulator does not
    model of it."""
    config = kwargs.get("config") or GEPAConfig()
    engine = config.engine
    evaluators = [n for n in ("evaluator", "batch_evaluator") if kwargs.get(n) is not None]
    # Its mode, as optimize_anything's docs name the three.
    searched = "generalization" if kwargs.get("valset") is not None else "multi-task search"
    meta: dict[str, Any] = {
        "api": "optimize_anything",
        "mode": "single-task search" if single_task(kwargs) else searched,
        "evaluator": " and ".join(evaluators),
        "adapter": "OptimizeAnythingAdapter",
        "parallel": bool(engine.parallel),
        "max_workers": engine.max_workers,
        "frontier_type": str(engine.frontier_type),
    }
    if engine.max_candidate_proposals is not None:
        meta["max_candidate_proposals"] = engine.max_candidate_proposals
    not_modelled = []
    if config.refiner is not None:
        meta["refiner"] = {"max_refinements": config.refiner.max_refinements}
        not_modelled.append(REFINER)
    if single_task(kwargs):
        not_modelled.append(SINGLE_TASK)
    if not_modelled:
        meta["not_modelled"] = not_modelled
    return meta


def recorded_config(config: GEPAConfig | None, parts: dict[str, Any]) -> GEPAConfig:
    """The user's GEPAConfig with the recorder's parts (as gepa.optimize's keyword
    arguments, `Recording._start`'s), each part changed a copy
    (optimize_anything writes into the config it is given). A refiner naming no LM is
    given the reflection LM as the user gave it, as gepa would, so its calls are not
    taken for reflections."""
    config = config or GEPAConfig()
    reflection = replace(config.reflection)
    if parts["reflection_lm"] is not None:
        # reflection_lm_kwargs made the recorded LM already (a model name), as gepa would.
        reflection.reflection_lm = parts["reflection_lm"]
        reflection.reflection_lm_kwargs = None
    refiner = config.refiner
    if refiner is not None:
        given_lm = config.reflection.reflection_lm
        refiner = replace(refiner, refiner_lm=refiner.refiner_lm or given_lm)
    return replace(
        config,
        engine=replace(
            config.engine,
            run_dir=parts["run_dir"],
            selection_strategy=parts["selection_strategy"],
        ),
        reflection=reflection,
        tracking=replace(config.tracking),
        merge=None if config.merge is None else replace(config.merge),
        refiner=refiner,
        callbacks=parts["callbacks"],
        stop_callbacks=parts["stop_callbacks"],
    )
