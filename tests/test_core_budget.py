"""Budgets as a DSPy user gives them: auto:LEVEL and full-evals:N become the metric calls DSPy
itself would hand gepa, wherever a budget is asked for (the CLI, pxn.api, `pxn run`).

DSPy is the reference: its dspy.GEPA.compile is run up to the moment it calls
gepa.optimize, and the budget it passes is compared with pxn's.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import gepa
import pytest
from conftest import assert_user_error, run_pxn
from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS
from dspy.utils import DummyLM
from dspy_program import Topic

from pxn.api import simulate
from pxn.budget import Budget, metric_calls_of
from pxn.errors import PxnError
from pxn.runner.config import RunConfig, plan
from pxn.runner.tasks import load_task
from pxn.sim.presets import load_scenario


class Handed(Exception):
    """gepa.optimize was reached: what DSPy handed it."""

    def __init__(self, kwargs: dict[str, Any]):
        self.kwargs = kwargs


def handed(**kwargs: Any) -> None:
    raise Handed(kwargs)


class Predictors(dspy.Module):
    """A program of `count` predictors, one after the other."""

    def __init__(self, count: int):
        super().__init__()
        self.steps = [dspy.Predict(Topic) for _ in range(count)]

    def forward(self, sentence: str) -> dspy.Prediction:
        for step in self.steps:
            prediction = step(sentence=sentence)
        return prediction


def rows(count: int) -> list[dspy.Example]:
    return [
        dspy.Example(sentence=f"sentence {i}", topic="sports").with_inputs("sentence")
        for i in range(count)
    ]


def dspys_budget(
    monkeypatch: pytest.MonkeyPatch,
    predictors: int,
    valset_size: int,
    trainset_size: int,
    **budget: Any,
) -> int:
    """The max_metric_calls dspy.GEPA.compile hands gepa for this budget and program (compile
    looks gepa.optimize up when it runs)."""
    optimizer = dspy.GEPA(
        metric=lambda gold, pred, trace=None, pred_name=None, pred_trace=None: 0.0,
        reflection_lm=DummyLM([{"new_instruction": "unused"}]),
        use_merge=False,
        **budget,
    )
    program = Predictors(predictors)
    assert len(program.named_predictors()) == predictors
    monkeypatch.setattr(gepa, "optimize", handed)
    with pytest.raises(Handed) as caught:
        optimizer.compile(program, trainset=rows(trainset_size), valset=rows(valset_size))
    return caught.value.kwargs["max_metric_calls"]


@pytest.mark.parametrize("predictors", [1, 3])
@pytest.mark.parametrize("level", list(AUTO_RUN_SETTINGS))
def test_an_auto_budget_is_dspys_own(monkeypatch, level: str, predictors: int) -> None:
    ours = metric_calls_of(
        f"auto:{level}", predictors=predictors, valset_size=100, trainset_size=50
    )
    assert ours == dspys_budget(monkeypatch, predictors, 100, 50, auto=level)
    assert ours > 100  # more than the seed's validation: a budget that searches


def test_full_evaluations_are_dspys_own(monkeypatch) -> None:
    ours = metric_calls_of("full-evals:3", predictors=2, valset_size=40, trainset_size=25)
    assert ours == dspys_budget(monkeypatch, 2, 40, 25, max_full_evals=3)


@pytest.mark.parametrize(
    ("given", "label", "calls"),
    [
        (400, "400", 400),
        ("400", "400", 400),
        (" 250 ", "250", 250),
        ("full-evals:2", "full-evals:2", 2 * (30 + 20)),
    ],
)
def test_metric_calls_and_full_evaluations_read_as_given(given, label, calls) -> None:
    budget = Budget.parse(given)
    assert budget.label == label
    assert budget.resolve(predictors=1, valset_size=20, trainset_size=30) == calls


@pytest.mark.parametrize(
    ("given", "predictors", "fragment"),
    [
        (
            "auto:superheavy",
            1,
            "budget auto:superheavy is not one of DSPy's: auto:light, auto:medium, auto:heavy",
        ),
        ("auto:", 1, "budget is metric calls (e.g. 400), auto:LEVEL or full-evals:N"),
        ("full-evals:0", 1, "budget must be at least 1: got 'full-evals:0'"),
        ("0", 1, "budget must be at least 1: got '0'"),
        ("lots", 1, "got 'lots'"),
        (2.5, 1, "got 2.5"),
        (True, 1, "got True"),
        ("auto:light", 0, "predictors must be a whole number >= 1: got 0"),
    ],
)
def test_a_bad_budget_is_one_line_in_domain_words(given, predictors, fragment) -> None:
    with pytest.raises(PxnError) as caught:
        metric_calls_of(given, predictors=predictors, valset_size=20, trainset_size=30)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_the_api_and_the_commands_take_dspys_budgets() -> None:
    hover = load_scenario("hover")
    light = metric_calls_of(
        "auto:light", predictors=3, valset_size=hover.valset_size, trainset_size=hover.trainset_size
    )
    assert simulate("hover", budget="auto:light", predictors=3, reps=2).scenario.budget == light
    printed = run_pxn(
        "simulate", "hover", "--budget", "auto:light", "--predictors", "3", "--reps", "2",
        "--format", "json",
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["scenario"]["budget"] == light
    two = 2 * (hover.valset_size + hover.trainset_size)
    swept = run_pxn("sweep", "hover", "--budget", "full-evals:2", "--shapes", "2x2", "--reps", "2")
    assert swept.returncode == 0, swept.stderr
    assert f"B={two} metric calls" in swept.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "hover", "--budget", "auto:superheavy"],
        ["sweep", "hover", "--budget", "auto:superheavy"],
        ["advise", "hover", "--budget", "auto:superheavy"],
        ["run", "--out", "never", "--budget", "auto:superheavy"],
    ],
)
def test_an_unknown_level_names_dspys_choices(args, tmp_path) -> None:
    ran = run_pxn(*[str(tmp_path / a) if a == "never" else a for a in args])
    assert_user_error(
        ran, "--budget auto:superheavy is not one of DSPy's: auto:light, auto:medium, auto:heavy"
    )
    assert not (tmp_path / "never").exists()


def test_a_real_run_takes_a_dspy_budget_for_its_tasks_components() -> None:
    task = load_task(None)
    ran = plan(RunConfig(out="unused", budget="auto:light"))
    assert ran.budget == metric_calls_of(
        "auto:light",
        predictors=len(task.seed_candidate),
        valset_size=len(task.val),
        trainset_size=len(task.train),
    )
    assert ran.budget_from == "auto:light"
    assert plan(RunConfig(out="unused", budget=60)).budget_from is None
