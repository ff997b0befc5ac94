"""Scenario: everything the simulator needs to predict one batched GEPA run.

A scenario is the workload and the machine (budget, data sizes, worker pool,
latencies, acceptance, load, tokens, prices, limits) and, when it was
inferred, how uncertain its parameters are; the shape P x N is what you vary
over it. Scenarios load from TOML and write back to it, and every mistake in
one is reported as a `PxnError` naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import tomli_w

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.failures import Failures
from pxn.fields import at_least, known_keys, share, table, whole
from pxn.files import write_text_atomically
from pxn.load import Loads
from pxn.prices import Prices
from pxn.quality import Quality
from pxn.rate_limits import RateLimits
from pxn.selection import Selection
from pxn.tokens import Tokens
from pxn.trace import ROLLOUT_PHASES
from pxn.uncertainty import Uncertainty

# How a stage's W workers serve its candidates (Scenario.worker_split).
WORKER_SPLITS = ("pooled", "per_candidate")
# Who runs the loop (Scenario.optimizer): gepa.optimize, or dspy.GEPA, whose adapter
# proposes the texts itself, one reflection at a time.
OPTIMIZERS = ("gepa", "dspy.GEPA")

# What a scenario cannot do without, each as a line to add: the smallest scenario.
REQUIRED = {
    "budget": "budget = 3000 (B, gepa's max_metric_calls)",
    "valset_size": "valset_size = 100 (V, the validation set's size)",
    "workers": "workers = 16 (W, rollouts at once)",
    "rollout": '[rollout] median = "4s", p90 = "9s" (a metric call\'s latency)',
    "reflection": '[reflection] median = "30s", p90 = "1 min" (a reflection\'s latency)',
}
# How proposals fare: one of these (Scenario._search_model).
SEARCH_MODELS = (
    "[acceptance] a0 = 0.25 (the chance a child beats its parent), or a [quality] table "
    "(the search model: the seed's score and what a proposal does to it; docs/scenario.md)"
)


@dataclass(frozen=True)
class CalibratedOn:
    """How much run a calibrated scenario saw: its longest run's metric calls and proposals.

    A prediction for a longer run extrapolates what those runs showed; the
    prediction report says by how much.
    """

    runs: int
    metric_calls: int
    proposals: int

    def validate(self) -> None:
        whole(self.runs, "calibrated_on runs")
        whole(self.metric_calls, "calibrated_on metric_calls")
        whole(self.proposals, "calibrated_on proposals", least=0)

    @classmethod
    def from_dict(cls, data: Any) -> CalibratedOn:
        fields = table(data, "[calibrated_on]")
        known_keys(fields, set(cls.__dataclass_fields__), "[calibrated_on]")
        missing = sorted(set(cls.__dataclass_fields__) - set(fields))
        if missing:
            raise PxnError(f"is missing field(s) {', '.join(missing)}", subject="[calibrated_on]")
        return cls(**fields)


@dataclass(frozen=True)
class Scenario:
    """One workload on one machine; docs/scenario.md says what each field means."""

    name: str
    budget: int  # B, metric calls
    valset_size: int  # V
    trainset_size: int
    workers: int  # W, rollouts at once
    rollout: Distribution  # one metric call
    reflection: Distribution  # one reflection LM call
    # How proposals fare: acceptance rates, or the search's quality model (one of the two).
    acceptance: Acceptance | None = None
    quality: Quality | None = None
    minibatch: int = 3  # b
    reflection_concurrency: int = 10  # C; gepa's own LM batches reflections 10 at a time
    stage_overhead: float = 0.0  # seconds of gepa's own work before each stage
    skip_perfect: float = 0.0  # probability a parent's minibatch is all-perfect (gepa skips it)
    selection: Selection = field(default_factory=lambda: Selection("all"))
    seed: int = 0
    description: str = ""
    # gepa's Pareto front holds this share of the candidates (tied and dominated
    # programs collapse): parents are drawn uniformly from it, so they recur.
    front_share: float = 1.0
    # Chance a selected child's text repeats an earlier selected sibling's: gepa
    # validates and keeps it once.
    duplicate_children: float = 0.0
    # How a stage's W workers serve its candidates: "pooled", any rollout takes any
    # free worker; "per_candidate", W split among them as DSPy's batch_evaluate does.
    worker_split: str = "pooled"
    # gepa's merge (use_merge): at most `max_merges` accepted (max_merge_invocations), in a
    # program of `components` texts (gepa merges only programs of two or more); under
    # acceptance rates a merge passes its subsample with chance `merge_acceptance`.
    merge: bool = False
    max_merges: int = 5
    components: int = 1
    merge_acceptance: float | None = None
    # Proposals lost before gepa judged them (a failed reflection, no reflective dataset).
    failures: Failures = field(default_factory=Failures)
    # gepa.optimize ("gepa") or dspy.GEPA, which reflects one proposal at a time (C = 1).
    optimizer: str = "gepa"
    # A phase's own rollout latency, where it differs from `rollout`.
    rollout_phases: dict[str, Distribution] = field(default_factory=dict)
    loads: Loads = field(default_factory=Loads)  # [load] in TOML
    # Dollars and provider limits; all optional (without them: no cost, no throttling).
    tokens: Tokens | None = None
    prices: Prices | None = None
    rate_limits: RateLimits = field(default_factory=RateLimits)
    uncertainty: Uncertainty | None = None
    calibrated_on: CalibratedOn | None = None  # written by pxn calibrate
    # The budget as dspy.GEPA takes it ("auto:light", "full-evals:3"), when the TOML gave it
    # so: `budget` is then DSPy's metric calls for it, worked out for this V, trainset and
    # the program's `predictors` (pxn.budget). None: the budget was given in metric calls.
    budget_given: str | None = None
    predictors: int | None = None  # the DSPy program's predictors (None: `components`)

    @property
    def program_predictors(self) -> int:
        """The predictors an auto budget is worked out for: the program's texts."""
        return self.components if self.predictors is None else self.predictors

    @property
    def from_dspy(self) -> bool:
        """Whether dspy.GEPA runs the loop, or the budget is one of its spellings."""
        return self.optimizer == "dspy.GEPA" or self.budget_given is not None

    def rollout_latency(self, phase: str) -> Distribution:
        return self.rollout_phases.get(phase, self.rollout)

    def mean_call_dollars(self, role: str) -> float:
        """Dollars of a mean call of `role` (task: a rollout; reflection) at this b."""
        if self.tokens is None or self.prices is None:
            raise PxnError("the scenario has no [tokens] and [prices] to count dollars in")
        return self.prices.dollars(role, *self.tokens.mean_call(role, self.minibatch))

    @property
    def counts_tokens(self) -> bool:
        """Whether a run draws token counts: something (prices, a token limit) uses them."""
        limits = self.rate_limits
        return self.tokens is not None and (
            self.prices is not None
            or limits.task.tpm is not None
            or limits.reflection.tpm is not None
        )

    # -- validation ------------------------------------------------------------

    def _search_model(self) -> Acceptance | Quality:
        """The one model of how proposals fare: [acceptance] rates or the [quality] model."""
        if self.acceptance is None and self.quality is None:
            raise PxnError(f"is missing acceptance: add {SEARCH_MODELS}", subject="scenario")
        if self.acceptance is not None and self.quality is not None:
            raise PxnError(
                "give [acceptance] or [quality], not both: the quality model decides "
                "acceptance itself",
                subject="scenario",
            )
        return self.acceptance if self.quality is None else self.quality

    def validate(self) -> Scenario:
        for name in ("budget", "valset_size", "trainset_size", "workers", "minibatch",
                     "reflection_concurrency"):  # fmt: skip
            whole(getattr(self, name), name)
        if self.budget < self.valset_size:
            raise PxnError(
                f"{self.budget} is smaller than one seed validation of V={self.valset_size}; "
                "raise the budget or shrink the valset",
                subject="budget",
            )
        if self.minibatch > self.trainset_size:
            raise PxnError(f"{self.minibatch} is larger than the trainset ({self.trainset_size})",
                           subject="minibatch")  # fmt: skip
        whole(self.seed, "seed", least=0)
        if self.predictors is not None:
            whole(self.predictors, "predictors")
            if self.merge and self.components != self.predictors:
                raise PxnError(
                    f"is {self.predictors}, but components is {self.components}: a DSPy "
                    "program's predictors are the texts gepa merges; give one of the two",
                    subject="predictors",
                )
        at_least(self.stage_overhead, "stage_overhead", unit=" seconds")
        share(self.skip_perfect, "skip_perfect", top_open=True)
        share(self.duplicate_children, "duplicate_children", top_open=True)
        if not (0 < self.front_share <= 1):
            raise PxnError(f"must be in (0, 1]: got {self.front_share!r}", subject="front_share")
        if self.worker_split not in WORKER_SPLITS:
            raise PxnError(
                f"must be one of {', '.join(map(repr, WORKER_SPLITS))}: got {self.worker_split!r} "
                "(per_candidate: W split among a stage's candidates, as dspy.GEPA does)",
                subject="worker_split",
            )
        self._validate_merge()
        self.failures.validate()
        if self.optimizer not in OPTIMIZERS:
            raise PxnError(
                f"must be one of {', '.join(map(repr, OPTIMIZERS))}: got {self.optimizer!r}",
                subject="optimizer",
            )
        if self.optimizer == "dspy.GEPA" and self.reflection_concurrency != 1:
            raise PxnError(
                f"is {self.reflection_concurrency}, but dspy.GEPA's adapter proposes one text at "
                'a time: set reflection_concurrency = 1 (or optimizer = "gepa")',
                subject="reflection_concurrency",
            )
        self.rollout.validate("rollout latency")
        for phase, latency in self.rollout_phases.items():
            if phase not in ROLLOUT_PHASES:
                raise PxnError(f"{phase!r} is not a phase ({', '.join(ROLLOUT_PHASES)})",
                               subject="rollout.phases")  # fmt: skip
            latency.validate(f"rollout latency in {phase}")
        self.reflection.validate("reflection latency")
        self._search_model().validate()
        measured = self.quality.seed_validation if self.quality is not None else ()
        if measured and len(measured) != self.valset_size:
            raise PxnError(
                f"holds {len(measured)} scores, one per validation example, but "
                f"valset_size is {self.valset_size}: they describe another valset; drop "
                "seed_validation to predict runs on this one",
                subject="quality seed_validation",
            )
        self.loads.validate()
        if self.tokens is not None:
            self.tokens.validate()
        if self.prices is not None:
            if self.tokens is None:
                raise PxnError(
                    "needs a [tokens] table to count what is paid for (pxn calibrate writes one "
                    "from traces with token counts)",
                    subject="[prices]",
                )
            self.prices.validate()
        self.rate_limits.validate(has_tokens=self.tokens is not None)
        if self.loads.reflection.prefix_seconds and self.rate_limits.reflection.to_dict():
            raise PxnError(
                "a prefix cache and provider rate limits on reflections are not modelled "
                "together (a local server's cache, a hosted API's limits); drop one",
                subject="load.reflection.prefix_seconds",
            )
        if self.calibrated_on is not None:
            self.calibrated_on.validate()
        return self

    @property
    def merges(self) -> bool:
        """Whether gepa may merge here: merge on, and a program of two components or more."""
        return self.merge and self.components > 1

    def _validate_merge(self) -> None:
        if not isinstance(self.merge, bool):
            raise PxnError(f"must be true or false: got {self.merge!r}", subject="merge")
        whole(self.max_merges, "max_merges")
        whole(self.components, "components")
        if not self.merge:
            given = [name for name, default in (("max_merges", 5), ("components", 1))
                     if getattr(self, name) != default] + (
                ["merge_acceptance"] if self.merge_acceptance is not None else [])  # fmt: skip
            if given:
                raise PxnError("applies to gepa's merge: add merge = true, or drop it",
                               subject=given[0])  # fmt: skip
            return
        if self.merge_acceptance is not None:
            if self.quality is not None:
                raise PxnError(
                    "is for [acceptance]: the quality model judges a merge itself "
                    "([quality] merge_pick)",
                    subject="merge_acceptance",
                )
            share(self.merge_acceptance, "merge_acceptance")
        elif self.merges and self.quality is None:
            raise PxnError(
                "is needed with merge = true and [acceptance]: add merge_acceptance = 0.5 "
                "(the chance a merge's subsample sum reaches its better parent's)",
                subject="merge_acceptance",
            )

    def validate_draws(self) -> None:
        """Check that every parameter draw names a parameter and gives a valid scenario."""
        if self.uncertainty is None:
            return
        for i in range(len(self.uncertainty)):  # replicate i runs draw i
            try:
                self.for_replicate(i).validate()
            except PxnError as exc:
                raise PxnError(f"draw {i + 1}: {exc}", subject="[uncertainty]") from None

    # -- variants ---------------------------------------------------------------

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed, validated again (its draws carry over).

        A budget given as DSPy spells it follows what it depends on (V, the
        trainset, the predictors); a budget given anew replaces the spelling.
        """
        if "budget" in changes and changes["budget"] != self.budget:
            changes.setdefault("budget_given", None)
        elif self.budget_given is not None and "budget_given" not in changes:
            given = dataclasses.replace(self, **changes)
            if given.resolved_budget() != self.budget:
                changes["budget"] = given.resolved_budget()
        return dataclasses.replace(self, **changes).validate()

    def resolved_budget(self) -> int:
        """B from `budget_given` for this scenario's V, trainset and predictors."""
        from pxn.budget import metric_calls_of

        assert self.budget_given is not None
        return metric_calls_of(
            self.budget_given,
            predictors=self.program_predictors,
            valset_size=self.valset_size,
            trainset_size=self.trainset_size,
        )

    def with_local_pool(self, servers: int | None, slowdown: float = 0.0) -> Scenario:
        """This scenario on one local LM pool serving both models (validated)."""
        return self.replace(loads=Loads.shared_pool(servers, slowdown))

    def with_parameters(self, values: dict[str, float]) -> Scenario:
        """This scenario with the parameters at these paths set, without its uncertainty.

        Not validated: a draw is checked once, when the scenario loads
        (validate_draws), not every time a replicate uses it.
        """
        scenario = dataclasses.replace(self, uncertainty=None)
        for path, value in values.items():
            parts = path.split(".")
            if parts[:2] == ["rollout", "phases"]:  # TOML nests phases under [rollout]
                parts = ["rollout_phases", *parts[2:]]
            elif parts[0] == "load":  # the [load] table is the field `loads`
                parts = ["loads", *parts[1:]]
            scenario = _with_value(scenario, parts, value, path)
        return scenario

    def for_replicate(self, replicate: int) -> Scenario:
        """The scenario replicate r runs: its parameter draw, when the scenario has draws.

        Each draw is applied once per scenario object and kept: the replicates
        of a draw all run the same scenario.
        """
        if self.uncertainty is None:
            return self
        draw = self.uncertainty.draw_of(replicate)
        applied = self._applied_draws
        if id(draw) not in applied:
            applied[id(draw)] = self.with_parameters(draw)
        return applied[id(draw)]

    @cached_property
    def _applied_draws(self) -> dict[int, Scenario]:
        """for_replicate's scenarios by the id of their draw (the draws live as long as self)."""
        return {}

    def __getstate__(self) -> dict[str, Any]:
        """The fields alone: a scenario sent to another process applies its draws there."""
        state = dict(self.__dict__)
        state.pop("_applied_draws", None)
        return state

    # -- TOML ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        rollout = self.rollout.to_dict()
        if self.rollout_phases:
            rollout["phases"] = {p: d.to_dict() for p, d in self.rollout_phases.items()}
        top: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "budget": self.budget if self.budget_given is None else self.budget_given,
            "valset_size": self.valset_size,
            "trainset_size": self.trainset_size,
            "minibatch": self.minibatch,
            "workers": self.workers,
            "reflection_concurrency": self.reflection_concurrency,
            "stage_overhead": self.stage_overhead,
            "skip_perfect": self.skip_perfect,
            "selection": str(self.selection),
            "seed": self.seed,
        }
        # Written only when set, so a scenario without them reads as it always did
        # (and TOML has no None).
        if self.front_share != 1.0:
            top["front_share"] = self.front_share
        if self.duplicate_children:
            top["duplicate_children"] = self.duplicate_children
        if self.worker_split != "pooled":
            top["worker_split"] = self.worker_split
        if self.optimizer != "gepa":
            top["optimizer"] = self.optimizer
        if self.predictors is not None:
            top["predictors"] = self.predictors
        if self.merge:
            top |= {"merge": True, "max_merges": self.max_merges, "components": self.components}
            if self.merge_acceptance is not None:
                top["merge_acceptance"] = self.merge_acceptance
        top |= {"rollout": rollout, "reflection": self.reflection.to_dict()}
        if self.acceptance is not None:
            top["acceptance"] = self.acceptance.to_dict()
        if self.quality is not None:
            top["quality"] = self.quality.to_dict()
        optional = {
            "failures": self.failures.to_dict(),
            "load": self.loads.to_dict(),
            "tokens": None if self.tokens is None else self.tokens.to_dict(),
            "prices": None if self.prices is None else self.prices.to_dict(),
            "rate_limits": None if self.rate_limits == RateLimits() else self.rate_limits.to_dict(),
            "uncertainty": None if self.uncertainty is None else self.uncertainty.to_dict(),
            "calibrated_on": None if self.calibrated_on is None else asdict(self.calibrated_on),
        }
        return top | {k: v for k, v in optional.items() if v}

    def to_toml(self, header: str = "") -> str:
        comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
        return comment + tomli_w.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "scenario") -> Scenario:
        refuse_non_finite(data)
        data = dict(data)
        toml_keys = set(cls.__dataclass_fields__) - {"rollout_phases", "loads", "budget_given"}
        known_keys(data, toml_keys | {"load"}, source)
        missing = [name for name in REQUIRED if name not in data]
        if "acceptance" not in data and "quality" not in data:
            missing.append("acceptance")
        if missing:
            fixes = [REQUIRED.get(name, SEARCH_MODELS) for name in missing]
            raise PxnError(
                f"is missing {', '.join(missing)}: add {'; '.join(fixes)}", subject=source
            )
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
            "loads": _loads(data),
        }
        if "acceptance" in data:
            parsed["acceptance"] = Acceptance.from_dict(data.pop("acceptance"))
        if "quality" in data:
            parsed["quality"] = Quality.from_dict(data.pop("quality"))
        if "failures" in data:
            parsed["failures"] = Failures.from_dict(data.pop("failures"))
        if "selection" in data:
            parsed["selection"] = Selection.parse(str(data.pop("selection")))
        if "tokens" in data:
            parsed["tokens"] = Tokens.from_dict(data.pop("tokens"), data.get("minibatch", 3))
        if "prices" in data:
            parsed["prices"] = Prices.from_dict(data.pop("prices"))
        if "rate_limits" in data:
            parsed["rate_limits"] = RateLimits.from_dict(data.pop("rate_limits"))
        if "uncertainty" in data:
            parsed["uncertainty"] = Uncertainty.from_dict(data.pop("uncertainty"))
        if "calibrated_on" in data:
            parsed["calibrated_on"] = CalibratedOn.from_dict(data.pop("calibrated_on"))
        scenario = cls(**parsed, **data).validate()
        scenario.validate_draws()
        return scenario

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
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
        return cls.from_dict(data, str(path))

    def save(self, path: str | Path, header: str = "") -> None:
        write_text_atomically(path, self.to_toml(header))


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


def refuse_non_finite(data: dict[str, Any]) -> None:
    """Refuse a NaN or infinity anywhere in a scenario's TOML, named by its table and index.

    TOML spells them nan and inf; no field of a scenario means them, and one
    let through makes every prediction NaN or never ending.
    """
    found = _non_finite(data, [])
    if found is not None:
        where, value = found
        raise PxnError(
            f"is {value}: a scenario's numbers must be finite", subject=_field_name(where)
        )


def _non_finite(value: Any, where: list[str | int]) -> tuple[list[str | int], float] | None:
    """The first NaN or infinity in `value` (tables and lists, however deep) and its path."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, [*where, key])
        if found is not None:
            return found
    return None


def _field_name(where: list[str | int]) -> str:
    """A path as the TOML file shows it: ["rollout", "samples", 3] -> "[rollout] samples[3]"."""
    in_list = next((i for i, part in enumerate(where) if isinstance(part, int)), len(where))
    table, key = where[: in_list - 1], where[in_list - 1 :]
    name = str(key[0]) + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in key[1:])
    return f"[{'.'.join(map(str, table))}] {name}" if table else name


def _loads(data: dict[str, Any]) -> Loads:
    """[load]: each model's servers and slowdown (no limit, no slowdown when absent)."""
    return Loads.from_dict(data.pop("load")) if "load" in data else Loads()


def _with_value(obj: Any, parts: list[str], value: float, path: str) -> Any:
    """`obj` with the parameter at `parts` set to `value` (dataclasses, dicts, a
    Distribution's params), each level rebuilt with its one change."""
    head, rest = parts[0], parts[1:]
    if isinstance(obj, dict):
        if head not in obj:
            raise PxnError(f"names no parameter of this scenario ({head!r} is not set)",
                           subject=f"parameter {path!r}")  # fmt: skip
        return {**obj, head: _with_value(obj[head], rest, value, path) if rest else value}
    names = {f.name for f in dataclasses.fields(obj)}
    if head in names:
        new = _with_value(getattr(obj, head), rest, value, path) if rest else value
        return dataclasses.replace(obj, **{head: new})
    if isinstance(obj, Distribution) and not rest:
        return dataclasses.replace(obj, params={**obj.params, head: value})
    raise PxnError("names no parameter of this scenario", subject=f"parameter {path!r}")
