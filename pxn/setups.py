"""A recorded run's own setup (its budget, W, data sizes, b, C and LM pool, as its
run_start declares them) and a scenario set to it: how a run is predicted again."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

from pxn.errors import PxnError
from pxn.load import Loads
from pxn.prices import ROLES
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.trace_reading import Trace

SETUP = ("budget", "workers", "valset_size", "trainset_size", "minibatch", "reflection_concurrency")


class SetupGroup(NamedTuple):
    """Runs sharing one setup: the scenario at it, and the shapes they ran (in order met)."""

    scenario: Scenario
    shapes: list[Shape]
    traces: list[Trace]


def setup_of(trace: Trace) -> dict[str, int]:
    start = trace.run_start
    if start.workers == 0:  # recorded without workers= from an adapter that timed no rollout
        raise PxnError(
            f"{trace.path}: the run's W is unknown (its adapter timed none of its rollouts and "
            "the recording declared no workers=W): record it with workers=W to validate it"
        )
    setup = {name: getattr(start, name) for name in SETUP}
    servers = start.meta.get("lm_servers")
    if isinstance(servers, int) and servers >= 1:  # the run's own LM pool, when it says
        setup["lm_servers"] = servers
    return setup


def at_setup(scenario: Scenario, setup: dict[str, int]) -> Scenario:
    """The scenario at a run's own setup; its LM pool, when it declares one, serves both models."""
    setup = dict(setup)
    servers = setup.pop("lm_servers", None)
    if servers is not None:
        loads = scenario.loads
        setup["loads"] = Loads(*(dataclasses.replace(loads.of(r), servers=servers) for r in ROLES))
    return scenario.replace(**setup)


def by_setup(scenario: Scenario, traces: Sequence[Trace]) -> list[SetupGroup]:
    """The runs grouped by setup, so that runs sharing one share one simulation per shape."""
    grouped: dict[tuple[int, ...], list[Trace]] = defaultdict(list)
    for trace in traces:
        grouped[tuple(setup_of(trace).values())].append(trace)
    return [
        SetupGroup(
            at_setup(scenario, setup_of(group[0])),
            list(dict.fromkeys(Shape.parse(t.run_start.shape) for t in group)),
            group,
        )
        for group in grouped.values()
    ]
