"""Scenario: everything the simulator needs to predict one batched GEPA run.

A scenario is the workload and the machine (budget, data sizes, worker pool,
latencies, acceptance, load, tokens, prices, limits) and, when it was
inferred, how uncertain its parameters are; the shape P x N is what you vary
over it. Scenarios load from TOML and write back to it (pxn.scenario_toml),
and every mistake in one is reported as a `PxnError` naming the field and the
fix.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.failures import Failures
from pxn.fields import at_least, is_number, required_table, share, table, whole
from pxn.files import write_text_atomically
from pxn.load import Loads
from pxn.prices import ROLES, Prices
from pxn.prompt_lengths import PromptLengths
from pxn.quality import Quality
from pxn.rate_limits import RateLimits
from pxn.selection import Selection
from pxn.tokens import Tokens
from pxn.trace import ROLLOUT_PHASES

WORKER_SPLITS = ("pooled", "per_candidate")  # Scenario.worker_split
OPTIMIZERS = ("gepa", "dspy.GEPA")  # Scenario.optimizer
# How proposals fare: one of these (Scenario._search_model).
SEARCH_MODELS = (
    "[acceptance] a0 = 0.25 (the chance a child beats its parent), or a [quality] table "
    "(the search model: the seed's score and what a proposal does to it; docs/scenario.md)"
)


@dataclass(frozen=True)
class Uncertainty:
    """What a scenario does not know exactly: a set of parameter draws ([uncertainty]).

    A scenario calibrated from a few runs, or inferred from a paper's few
    numbers, knows its parameters only up to an uncertainty. It carries that as
    draws: each a set of parameter values, named by their path in the scenario
    ("rollout.scale", "acceptance.a0", "load.task.slowdown",
    "rollout.phases.full_val.s", "stage_overhead"), that replace the point
    estimate's (Scenario.with_parameters). A prediction runs replicate r with
    draw r mod D, so its interval spans the parameters and the run-to-run noise
    together, and the share of the spread each explains can be told apart (law
    of total variance).
    """

    source: str  # how the draws were made, in a sentence
    draws: tuple[dict[str, float], ...]

    def __len__(self) -> int:
        return len(self.draws)

    def draw_of(self, replicate: int) -> dict[str, float]:
        return self.draws[replicate % len(self.draws)]

    @property
    def parameters(self) -> list[str]:
        return sorted({path for draw in self.draws for path in draw})

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "draws": [dict(d) for d in self.draws]}

    @classmethod
    def from_dict(cls, data: Any) -> Uncertainty:
        fields = table(data, "[uncertainty]")
        draws = fields.get("draws")
        if not isinstance(draws, list) or not draws:
            raise PxnError("needs a non-empty list of [[uncertainty.draws]]",
                           subject="[uncertainty]")  # fmt: skip
        for i, draw in enumerate(draws, start=1):
            if not isinstance(draw, dict) or not draw:
                raise PxnError(f"draw {i} is not a table of parameter values",
                               subject="[uncertainty]")  # fmt: skip
            bad = [k for k, v in draw.items() if not (is_number(v) and math.isfinite(v))]
            if bad:
                raise PxnError(f"draw {i}: {bad[0]} must be a finite number",
                               subject="[uncertainty]")  # fmt: skip
        source = str(fields.get("source", ""))
        return cls(source, tuple({k: float(v) for k, v in d.items()} for d in draws))


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
        names = sorted(cls.__dataclass_fields__)
        return cls(**required_table(data, set(names), names, "[calibrated_on]"))


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
    # How a candidate's prompt length scales its rollouts (None: every candidate's as the seed's).
    prompt: PromptLengths | None = None
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
        tpm = any(self.rate_limits.of(role).tpm is not None for role in ROLES)
        return self.tokens is not None and (self.prices is not None or tpm)

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
        """Every field checked, in the order a reader meets them: the run's sizes, gepa's
        loop, the latencies and the search, the machine's load, tokens, prices and limits.
        Each mistake is one PxnError naming the field."""
        self._validate_sizes()
        self._validate_loop()
        self._validate_calls()
        self._validate_load_and_costs()
        if self.calibrated_on is not None:
            self.calibrated_on.validate()
        return self

    def _validate_sizes(self) -> None:
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

    def _validate_loop(self) -> None:
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
        if self.prompt is not None:
            self.prompt.validate()
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

    def _validate_calls(self) -> None:
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

    def _validate_load_and_costs(self) -> None:
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
            from pxn.budget import metric_calls_of

            given = dataclasses.replace(self, **changes)
            changes["budget"] = metric_calls_of(
                self.budget_given,
                predictors=given.program_predictors,
                valset_size=given.valset_size,
                trainset_size=given.trainset_size,
            )
        return dataclasses.replace(self, **changes).validate()

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

    # -- TOML: pxn.scenario_toml's, imported when called (it imports this module) ------

    def to_dict(self) -> dict[str, Any]:
        from pxn.scenario_toml import scenario_to_dict

        return scenario_to_dict(self)

    def to_toml(self, header: str = "") -> str:
        from pxn.scenario_toml import scenario_to_toml

        return scenario_to_toml(self, header)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "scenario") -> Scenario:
        from pxn.scenario_toml import scenario_from_dict

        return scenario_from_dict(data, source)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        from pxn.scenario_toml import load_scenario_file

        return load_scenario_file(path)

    def save(self, path: str | Path, header: str = "") -> None:
        write_text_atomically(path, self.to_toml(header))


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
