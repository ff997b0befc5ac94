"""Scenario: TOML round trip and one clear message per mistake."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from sim_helpers import fixed, make_scenario

from pxn.errors import PxnError
from pxn.scenario import Acceptance, Latency, Scenario, Shape, parse_shapes


def toml_of(**changes) -> dict:
    """A valid scenario as TOML data; changes replace (or, with None, drop) fields."""
    data = make_scenario().to_dict()
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


def load_error(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    with pytest.raises(PxnError) as caught:
        Scenario.load(path)
    message = str(caught.value)
    assert "\n" not in message  # one line for the CLI
    return message


@pytest.mark.parametrize(
    "scenario",
    [
        make_scenario(),
        make_scenario(
            acceptance=Acceptance(0.4, tau=25.0),
            selection="topk:3",
            skip_perfect=0.2,
            rollout=fixed(1.25),
            reflection=Latency("empirical", samples=(3.0, 4.5, 9.25)),
            description="with every optional field set",
            lm_servers=2,
            load_slowdown=0.35,
        ),
        make_scenario(rollout=Latency("gamma", {"a": 2.0, "loc": 0.5, "scale": 1.5})),
    ],
    ids=["defaults", "everything", "gamma"],
)
def test_save_then_load_is_the_same_scenario(scenario: Scenario, tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    scenario.save(path, header="a comment\n\nover lines")
    assert path.read_text().startswith("# a comment\n#\n# over lines\n")
    assert Scenario.load(path) == scenario


def test_shape_parsing() -> None:
    assert Shape.parse("single") == Shape(1, 1)
    assert Shape.parse(" 2 x 4 ") == Shape(2, 4)
    assert Shape(1, 1).label == "single" and Shape(8, 2).label == "8x2"
    assert Shape(4, 4).k == 16
    assert parse_shapes("single,2x2,") == [Shape(1, 1), Shape(2, 2)]
    with pytest.raises(PxnError, match=r"^P x N needs P, N >= 1: got '2x0'$"):
        Shape.parse("2x0")
    with pytest.raises(PxnError, match=r"a shape is 'PxN'.*got 'two'"):
        Shape.parse("two")


def test_budget_smaller_than_seed_validation(tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(budget=50, valset_size=100))
    assert message.startswith("budget 50 is smaller than one seed validation of V=100")


def test_unknown_distribution_suggests_close_names(tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(rollout={"dist": "lognorml", "s": 0.5}))
    assert "unknown latency distribution 'lognorml'" in message
    assert "did you mean" in message and "lognorm" in message
    assert message.startswith("rollout latency")


def test_unknown_field_suggests_the_known_one(tmp_path: Path) -> None:
    data = toml_of(workers=None)
    data["worker"] = 8
    message = load_error(tmp_path, data)
    assert "unknown field 'worker'" in message and "did you mean 'workers'" in message


@pytest.mark.parametrize("field", ["budget", "valset_size", "rollout", "acceptance"])
def test_missing_field_is_named(field: str, tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(**{field: None}))
    assert f"missing field(s) {field}" in message


@pytest.mark.parametrize("selection", ["worst", "topk:0", "topk", "best:2"])
def test_bad_selection(selection: str, tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(selection=selection))
    assert message == f"selection is all, best or topk:K with K >= 1: got {selection!r}"


@pytest.mark.parametrize("a0", [-0.1, 1.5])
def test_acceptance_outside_unit_interval(a0: float, tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(acceptance={"a0": a0}))
    assert message == f"acceptance a0 must be a probability in [0, 1]: got {a0}"


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"workers": 0}, "workers must be a whole number >= 1: got 0"),
        ({"minibatch": 60}, "minibatch 60 is larger than the trainset (50)"),
        ({"skip_perfect": 1.0}, "skip_perfect must be in [0, 1)"),
        ({"acceptance": {"a0": 0.5, "tau": 0}}, "acceptance tau must be > 0"),
        ({"acceptance": {"tau": 3}}, "[acceptance] needs a0"),
        ({"rollout": {"dist": "empirical", "samples": []}}, "non-empty 'samples'"),
        ({"rollout": {"dist": "empirical", "samples": [1, -2]}}, "must be >= 0 seconds"),
        ({"rollout": {"dist": "norm", "loc": 1, "scale": 1}}, "no negative latencies"),
        ({"rollout": {"dist": "lognorm", "s": "wide"}}, "parameter(s) s must be numbers"),
        ({"rollout": {"dist": "lognorm"}}, "bad parameters for lognorm"),
        ({"rollout": 3.5}, "a latency is a table with 'dist'"),
        ({"lm_servers": 0}, "lm_servers must be a whole number >= 1"),
        ({"lm_servers": 2.5}, "lm_servers must be a whole number >= 1"),
        ({"load_slowdown": -0.1}, "load_slowdown must be >= 0"),
    ],
)
def test_other_mistakes_each_have_their_message(changes: dict, fragment: str, tmp_path) -> None:
    assert fragment in load_error(tmp_path, toml_of(**changes))


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = [\n", encoding="utf-8")
    with pytest.raises(PxnError, match="is not valid TOML"):
        Scenario.load(bad)
    with pytest.raises(PxnError, match="cannot read scenario"):
        Scenario.load(tmp_path / "absent.toml")


def test_latency_sampling_and_means() -> None:
    rng = np.random.default_rng(0)
    assert fixed(2.5).sample(rng, 4).tolist() == [2.5] * 4
    assert fixed(2.5).mean() == 2.5
    gamma = Latency("gamma", {"a": 3.0, "scale": 2.0})
    assert gamma.mean() == pytest.approx(6.0)
    assert gamma.sample(rng, 20000).mean() == pytest.approx(6.0, rel=0.03)


def test_replace_validates_again() -> None:
    scenario = make_scenario()
    assert scenario.replace(workers=3).workers == 3
    with pytest.raises(PxnError, match="budget 10 is smaller"):
        scenario.replace(budget=10)


def test_decaying_acceptance_probability() -> None:
    decaying = Acceptance(0.8, tau=10.0)
    assert decaying.probability(0) == pytest.approx(0.8)
    assert decaying.probability(10) == pytest.approx(0.8 / math.e)
    assert Acceptance(0.3).probability(1000) == 0.3


def test_lm_fields_default_to_no_limit_and_are_not_written_unset() -> None:
    """Scenarios written before lm_servers and load_slowdown existed read and write alike."""
    data = make_scenario().to_dict()
    assert "lm_servers" not in data and "load_slowdown" not in data
    scenario = Scenario.from_dict(data)
    assert scenario.lm_servers is None and scenario.load_slowdown == 0.0
