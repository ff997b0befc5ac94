"""The shared vocabulary: shapes, selections and dollars, each parsed or computed once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pxn.durations import format_span, parse_duration
from pxn.errors import PxnError
from pxn.prices import Prices, model_prices
from pxn.selection import Selection
from pxn.shape import Shape, parse_shapes

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(
    ("text", "shape"),
    [("single", Shape(1, 1)), ("1x1", Shape(1, 1)), ("2x4", Shape(2, 4)), (" 8 X 2 ", Shape(8, 2))],
)
def test_shapes_parse_every_spelling(text, shape):
    assert Shape.parse(text) == shape


@pytest.mark.parametrize("bad", ["0x2", "2x0", "2", "axb", "-1x2", "", "2x2x2"])
def test_bad_shapes_are_named(bad):
    with pytest.raises(PxnError) as caught:
        Shape.parse(bad)
    assert caught.value.subject == "shape"
    assert repr(bad) in str(caught.value)


def test_shape_lists_refuse_repeats_and_emptiness():
    assert parse_shapes("single,2x2") == [Shape(1, 1), Shape(2, 2)]
    with pytest.raises(PxnError, match="single twice"):
        parse_shapes("single,1x1")
    with pytest.raises(PxnError, match=r"^shapes name each shape once: 2x2, single twice$"):
        parse_shapes("single,2x2,single,2X2")
    with pytest.raises(PxnError, match="at least one shape"):
        parse_shapes(" , ")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("90m", 5400),
        ("1h30m", 5400),
        ("45min", 2700),
        ("2.5 min", 150),
        ("1.5h", 5400),
        ("2d", 172800),
        ("450ms", 0.45),
    ],
)
def test_durations_parse_every_unit(text: str, seconds: float) -> None:
    assert parse_duration(text, "--deadline") == seconds


def test_a_duration_without_a_unit_is_refused_with_the_units_it_could_mean() -> None:
    # A bare 90 was once read as seconds; a user who meant minutes got a deadline 60x short.
    with pytest.raises(PxnError) as caught:
        parse_duration(" 90 ", "--deadline")
    assert caught.value.subject == "--deadline"
    assert str(caught.value) == "--deadline 90 has no unit; give a unit: 90s, 90m or 90h"


@pytest.mark.parametrize("bad", ["0s", "0h0m", "soon", "-5m", "5 parsecs"])
def test_bad_durations_are_named(bad: str) -> None:
    with pytest.raises(PxnError, match=r"^--deadline (must be longer than zero|is a duration)"):
        parse_duration(bad, "--deadline")


@pytest.mark.parametrize(
    ("text", "limit"), [("all", None), ("best", 1), ("topk:3", 3), ("TopK:2", 2)]
)
def test_selections_and_their_limits(text, limit):
    selection = Selection.parse(text)
    assert selection.limit == limit
    assert Selection.parse(str(selection)) == selection


@pytest.mark.parametrize("bad", ["topk:0", "topk", "first", "topk:-1"])
def test_bad_selections_are_named(bad):
    with pytest.raises(PxnError) as caught:
        Selection.parse(bad)
    assert caught.value.subject == "selection"


def test_an_error_can_be_renamed_to_a_flag():
    with pytest.raises(PxnError) as caught:
        Shape.parse("2x0")
    assert str(caught.value.naming("--shape")).startswith("--shape needs P, N >= 1")


def test_dollars_are_tokens_times_price_per_million():
    prices = Prices(task_input=0.4, task_output=1.6, reflection_input=0.25, reflection_output=2.0)
    assert prices.dollars("task", 1_000_000, 0) == pytest.approx(0.4)
    assert prices.dollars("task", 500, 250) == pytest.approx((500 * 0.4 + 250 * 1.6) / 1e6)
    assert prices.dollars("reflection", 2000, 1000) == pytest.approx((2000 * 0.25 + 1000 * 2) / 1e6)


def test_model_prices_come_from_litellms_table_without_importing_it():
    assert model_prices("openai/gpt-4.1-mini") == (0.4, 1.6)  # the provider prefix is dropped
    assert model_prices("gpt-5-mini") == (0.25, 2.0)
    with pytest.raises(PxnError, match="did you mean"):
        model_prices("gpt-4.1-minni")
    # In a fresh interpreter: a priced scenario loads without importing litellm or
    # touching the environment.
    check = (
        "import os, sys; from pxn.scenario import Scenario; "
        "s = Scenario.load(sys.argv[1]); assert s.prices.task_input == 0.4, s.prices; "
        "assert 'litellm' not in sys.modules; "
        "assert 'LITELLM_LOCAL_MODEL_COST_MAP' not in os.environ"
    )
    scenario = ROOT / "experiments" / "advise_example" / "livebench-math-api.toml"
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    done = subprocess.run([sys.executable, "-c", check, scenario], env=env, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_span_of_durations_names_a_shared_unit_once() -> None:
    assert format_span(8500, 11800) == "2.36-3.28 h"
    assert format_span(50, 70) == "50.0 s - 1.2 min"
