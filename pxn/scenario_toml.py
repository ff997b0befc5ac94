"""A Scenario in TOML: read (each mistake one line naming the field and its fix) and written.

docs/scenario.md is the format. Scenario.load, from_dict, to_dict, to_toml
and save are these functions; reading checks every key, refuses NaN and
infinity, turns dspy.GEPA's budgets into metric calls, and validates the
scenario and its parameter draws.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tomli_w

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.failures import Failures
from pxn.fields import known_keys, table, whole
from pxn.load import Loads
from pxn.prices import Prices
from pxn.prompt_lengths import PromptLengths
from pxn.quality import Quality
from pxn.rate_limits import RateLimits
from pxn.scenario import SEARCH_MODELS, CalibratedOn, Scenario, Uncertainty
from pxn.selection import Selection
from pxn.tokens import Tokens

# What a scenario cannot do without, each as a line to add: the smallest scenario.
REQUIRED = {
    "budget": "budget = 3000 (B, gepa's max_metric_calls)",
    "valset_size": "valset_size = 100 (V, the validation set's size)",
    "workers": "workers = 16 (W, rollouts at once)",
    "rollout": '[rollout] median = "4s", p90 = "9s" (a metric call\'s latency)',
    "reflection": '[reflection] median = "30s", p90 = "1 min" (a reflection\'s latency)',
}
# The top-level fields a scenario's TOML always has, in this order.
ALWAYS_WRITTEN = ("name", "description", "budget", "valset_size", "trainset_size", "minibatch",
                  "workers", "reflection_concurrency", "stage_overhead", "skip_perfect",
                  "selection", "seed")  # fmt: skip


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario as TOML data: what it sets, its defaults left out."""
    rollout = scenario.rollout.to_dict()
    if scenario.rollout_phases:
        rollout["phases"] = {p: d.to_dict() for p, d in scenario.rollout_phases.items()}
    top: dict[str, Any] = {name: getattr(scenario, name) for name in ALWAYS_WRITTEN}
    top["selection"] = str(scenario.selection)
    if scenario.budget_given is not None:
        top["budget"] = scenario.budget_given
    # Written only when set, so a scenario without them reads as it always did
    # (and TOML has no None).
    for name in ("front_share", "duplicate_children", "worker_split", "optimizer", "predictors"):
        if getattr(scenario, name) != Scenario.__dataclass_fields__[name].default:
            top[name] = getattr(scenario, name)
    if scenario.merge:
        top |= {"merge": True, "max_merges": scenario.max_merges, "components": scenario.components}
        if scenario.merge_acceptance is not None:
            top["merge_acceptance"] = scenario.merge_acceptance
    top |= {"rollout": rollout, "reflection": scenario.reflection.to_dict()}
    limits = scenario.rate_limits
    optional = {
        "acceptance": None if scenario.acceptance is None else scenario.acceptance.to_dict(),
        "quality": None if scenario.quality is None else scenario.quality.to_dict(),
        "failures": scenario.failures.to_dict(),
        "prompt": None if scenario.prompt is None else scenario.prompt.to_dict(),
        "load": scenario.loads.to_dict(),
        "tokens": None if scenario.tokens is None else scenario.tokens.to_dict(),
        "prices": None if scenario.prices is None else scenario.prices.to_dict(),
        "rate_limits": None if limits == RateLimits() else limits.to_dict(),
        "uncertainty": None if scenario.uncertainty is None else scenario.uncertainty.to_dict(),
        "calibrated_on": None if scenario.calibrated_on is None else asdict(scenario.calibrated_on),
    }
    return top | {k: v for k, v in optional.items() if v}


def scenario_to_toml(scenario: Scenario, header: str = "") -> str:
    """The scenario's TOML, after `header` as comment lines."""
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + tomli_w.dumps(scenario_to_dict(scenario))


def scenario_from_dict(data: dict[str, Any], source: str = "scenario") -> Scenario:
    """The scenario in TOML data read from `source`, validated, its draws included."""
    refuse_non_finite(data)
    data = dict(data)
    toml_keys = set(Scenario.__dataclass_fields__) - {"rollout_phases", "loads", "budget_given"}
    known_keys(data, toml_keys | {"load"}, source)
    missing = [name for name in REQUIRED if name not in data]
    if "acceptance" not in data and "quality" not in data:
        missing.append("acceptance")
    if missing:
        fixes = [REQUIRED.get(name, SEARCH_MODELS) for name in missing]
        raise PxnError(f"is missing {', '.join(missing)}: add {'; '.join(fixes)}", subject=source)
    # gepa validates on the trainset when given no valset: then the two are one set.
    data.setdefault("trainset_size", data["valset_size"])
    if isinstance(data["budget"], str):  # dspy.GEPA's spelling: its metric calls
        data["budget_given"] = data["budget"]
        data["budget"] = _dspy_budget(data)
    rollout, phases = data.pop("rollout"), {}
    if isinstance(rollout, dict):  # [rollout.phases.NAME]: a phase's own latency
        rollout = dict(rollout)
        phases = table(rollout.pop("phases", {}), "[rollout.phases]")
    parsed: dict[str, Any] = {
        "name": str(data.pop("name", Path(source).stem)),
        "rollout": Distribution.from_dict(rollout, "rollout latency"),
        "rollout_phases": {
            phase: Distribution.from_dict(latency, f"rollout latency in {phase}")
            for phase, latency in phases.items()
        },
        "reflection": Distribution.from_dict(data.pop("reflection"), "reflection latency"),
        "loads": Loads.from_dict(data.pop("load")) if "load" in data else Loads(),
    }
    # The optional tables, each read by its own type, in this order (the first bad one is told).
    readers: dict[str, Callable[[Any], Any]] = {
        "acceptance": Acceptance.from_dict,
        "quality": Quality.from_dict,
        "failures": Failures.from_dict,
        "prompt": PromptLengths.from_dict,
        "selection": lambda value: Selection.parse(str(value)),
        "tokens": lambda value: Tokens.from_dict(value, data.get("minibatch", 3)),
        "prices": Prices.from_dict,
        "rate_limits": RateLimits.from_dict,
        "uncertainty": Uncertainty.from_dict,
        "calibrated_on": CalibratedOn.from_dict,
    }
    for key, read in readers.items():
        if key in data:
            parsed[key] = read(data.pop(key))
    scenario = Scenario(**parsed, **data).validate()
    scenario.validate_draws()
    return scenario


def load_scenario_file(path: str | Path) -> Scenario:
    """The scenario in a TOML file; a file that is not one is the user's error."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if b"\0" in raw:  # valid UTF-8 perhaps, but no text file holds a NUL
            raise UnicodeError
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeError:
        raise PxnError("is not a TOML text file (it holds binary data)",
                       subject=f"scenario {path}") from None  # fmt: skip
    except OSError as exc:
        raise PxnError(f"cannot read scenario {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PxnError(f"is not valid TOML: {exc}", subject=f"scenario {path}") from None
    return scenario_from_dict(data, str(path))


def _dspy_budget(data: dict[str, Any]) -> int:
    """The metric calls of a TOML budget spelled as dspy.GEPA takes it (pxn.budget)."""
    from pxn.budget import metric_calls_of

    predictors = data.get("predictors", data.get("components", 1))
    for name, value in (("predictors", predictors), ("valset_size", data["valset_size"]),
                        ("trainset_size", data["trainset_size"])):  # fmt: skip
        whole(value, name)
    return metric_calls_of(
        data["budget"],
        predictors=predictors,
        valset_size=data["valset_size"],
        trainset_size=data["trainset_size"],
    )


def refuse_non_finite(value: Any, where: tuple[str | int, ...] = ()) -> None:
    """Refuse a NaN or infinity anywhere in a scenario's TOML (tables and lists, however
    deep), named by its table and index.

    TOML spells them nan and inf; no field of a scenario means them, and one
    let through makes every prediction NaN or never ending.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise PxnError(
            f"is {value}: a scenario's numbers must be finite", subject=_field_name(where)
        )
    if isinstance(value, dict | list):
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            refuse_non_finite(item, (*where, key))


def _field_name(where: tuple[str | int, ...]) -> str:
    """A path as the TOML file shows it: ["rollout", "samples", 3] -> "[rollout] samples[3]"."""
    in_list = next((i for i, part in enumerate(where) if isinstance(part, int)), len(where))
    table, key = where[: in_list - 1], where[in_list - 1 :]
    name = str(key[0]) + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in key[1:])
    return f"[{'.'.join(map(str, table))}] {name}" if table else name
