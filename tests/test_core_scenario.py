"""Scenario: TOML round trip and one clear message per mistake."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import tomli_w
from sim_helpers import fixed, make_scenario

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.load import Load, Loads
from pxn.prices import Prices
from pxn.prompt_lengths import PromptLengths
from pxn.quality import Quality
from pxn.rate_limits import RateLimit, RateLimits
from pxn.scenario import Scenario
from pxn.shape import Shape, parse_shapes
from pxn.tokens import Tokens


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
            reflection=Distribution("empirical", samples=(3.0, 4.5, 9.25)),
            description="with every optional field set",
            lm_servers=2,
            load_slowdown=0.35,
        ),
        make_scenario(rollout=Distribution("gamma", {"a": 2.0, "loc": 0.5, "scale": 1.5})),
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
    with pytest.raises(PxnError, match=r"^shape needs P, N >= 1 \(P x N\): got '2x0'$"):
        Shape.parse("2x0")
    with pytest.raises(PxnError, match=r"^shape is 'PxN'.*got 'two'"):
        Shape.parse("two")


def test_budget_smaller_than_seed_validation(tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(budget=50, valset_size=100))
    assert message.startswith("budget 50 is smaller than one seed validation of V=100")


def test_unknown_distribution_suggests_close_names(tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(rollout={"dist": "lognorml", "s": 0.5}))
    assert "unknown distribution 'lognorml'" in message
    assert "did you mean" in message and "lognorm" in message
    assert message.startswith("rollout latency")


def test_unknown_field_suggests_the_known_one(tmp_path: Path) -> None:
    data = toml_of(workers=None)
    data["worker"] = 8
    message = load_error(tmp_path, data)
    assert "unknown field 'worker'" in message and "did you mean 'workers'" in message


@pytest.mark.parametrize(
    "field", ["budget", "valset_size", "workers", "rollout", "reflection", "acceptance"]
)
def test_a_missing_field_is_named_with_a_line_that_adds_it(field: str, tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(**{field: None}))
    assert message.startswith(f"{tmp_path / 'bad.toml'} is missing {field}: add ")
    # The line offered, as TOML ('[table] key = v, key = v' a table of its own), loads.
    offered = re.sub(r" \(.*\)$", "", message.split(": add ", 1)[1])
    table = re.match(r"\[(\w+)\] (.*)", offered)
    data = toml_of(**{field: None})
    if table:
        data[table[1]] = tomllib.loads(table[2].replace(", ", "\n"))
    else:
        data |= tomllib.loads(offered)
    assert Scenario.from_dict(data).budget > 0


def test_the_trainset_defaults_to_the_valset(tmp_path: Path) -> None:
    # gepa validates on the trainset when given no valset: the two are then one set.
    assert Scenario.from_dict(toml_of(trainset_size=None, valset_size=30)).trainset_size == 30
    assert Scenario.from_dict(toml_of(trainset_size=70)).trainset_size == 70


# -- the smallest scenario, and latencies as people know them ------------------------

SMALLEST = """
budget = 2000
valset_size = 100
workers = 16

[rollout]
median = "4s"
p90 = "9s"

[reflection]
median = "30s"
p90 = "1 min"

[acceptance]
a0 = 0.25
"""


def test_the_smallest_scenario_loads_with_gepas_defaults_and_round_trips(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(SMALLEST, encoding="utf-8")
    scenario = Scenario.load(path)
    assert (scenario.name, scenario.trainset_size) == ("mine", 100)
    assert (scenario.minibatch, scenario.reflection_concurrency) == (3, 10)
    rollout, reflection = (
        scipy.stats.lognorm(**d.params) for d in (scenario.rollout, scenario.reflection)
    )
    assert (rollout.median(), rollout.ppf(0.9)) == pytest.approx((4.0, 9.0))
    assert (reflection.median(), reflection.ppf(0.9)) == pytest.approx((30.0, 60.0))
    written = tmp_path / "written.toml"
    scenario.save(written)
    assert Scenario.load(written) == scenario


@pytest.mark.parametrize(
    ("latency", "median", "p90", "mean", "sd"),
    [
        ({"median": "4s", "p90": "9s"}, 4.0, 9.0, None, None),
        ({"median": 4, "p90": 9.0}, 4.0, 9.0, None, None),  # plain numbers: seconds
        ({"median": "450ms", "p90": "1.2s"}, 0.45, 1.2, None, None),
        ({"median": "2.5 min", "p90": "4min"}, 150.0, 240.0, None, None),
        ({"median": "1m30s", "spread": 0.5}, 90.0, 90 * math.exp(0.5 * 1.2815515655), None, None),
        ({"mean": "2.5 min", "sd": 60}, None, None, 150.0, 60.0),
        ({"mean": 8, "sd": "8s"}, None, None, 8.0, 8.0),
    ],
)
def test_a_latency_given_by_its_median_or_mean_is_the_lognormal_that_matches(
    latency: dict, median: float | None, p90: float | None, mean: float | None, sd: float | None
) -> None:
    parsed = Distribution.from_dict(latency, "rollout latency")
    assert parsed.dist == "lognorm" and set(parsed.params) == {"s", "scale"}
    frozen = scipy.stats.lognorm(**parsed.params)
    if median is not None:
        assert frozen.median() == pytest.approx(median)
        assert frozen.ppf(0.9) == pytest.approx(p90)
    else:
        assert (frozen.mean(), frozen.std()) == pytest.approx((mean, sd))


def test_a_latency_by_its_median_keeps_its_cap_and_token_counts_take_numbers() -> None:
    capped = Distribution.from_dict({"median": "4s", "p90": "9s", "cap": "2 min"}, "rollout")
    assert (capped.cap, capped.params["scale"]) == (120.0, 4.0)
    tokens = Distribution.from_dict({"median": 800, "spread": 0.4}, "tokens.x", unit="tokens")
    assert tokens.params == {"s": 0.4, "scale": 800.0}


@pytest.mark.parametrize(
    ("latency", "message"),
    [
        (
            {"median": "4s"},
            "rollout latency gives a median but not how far calls spread: add p90 (9 calls in "
            '10 end within it, e.g. p90 = "9s") or spread (the log-sd, e.g. spread = 0.5)',
        ),
        ({"mean": "4s"}, "rollout latency gives a mean but not how far calls spread: add sd"),
        (
            {"median": "4s", "p90": "3s"},
            "rollout latency p90 3 s is not above the median 4 s: 9 calls in 10 end within p90, "
            "half within the median",
        ),
        (
            {"median": "4", "p90": "9s"},
            "rollout latency median 4 has no unit; give a unit: 4s, 4m or 4h",
        ),
        ({"median": "4s", "p90": "soon"}, "rollout latency p90 is a duration like 3h"),
        ({"median": -4, "p90": 9}, "rollout latency median must be a number > 0 (seconds"),
        ({"median": "4s", "spread": "0.5"}, "rollout latency spread must be a number > 0 (the"),
        ({"median": "4s", "spread": 0}, "rollout latency spread must be a number > 0 (the"),
        ({"median": "4s", "p95": "9s"}, "unknown field 'p95' (did you mean 'p90'?)"),
        ({"median": "4s", "sd": "2s"}, "gives median and sd: give median with p90, median"),
        ({"median": "4s", "p90": "9s", "spread": 0.5}, "gives median and p90 and spread: give"),
        ({"dist": "lognorm", "median": 4}, "rollout latency gives dist and median: median, p90"),
        (3.5, 'rollout latency is a table: a median with p90 or spread (median = "4s", p90 ='),
    ],
)
def test_each_latency_mistake_is_one_line(latency: object, message: str, tmp_path: Path) -> None:
    assert message in load_error(tmp_path, toml_of(rollout=latency))


def test_a_token_count_is_a_number_not_a_duration(tmp_path: Path) -> None:
    tokens = TOKENS.to_dict() | {"rollout_input": {"median": "800", "p90": 1500}}
    assert "tokens.rollout_input median must be a number > 0 (tokens): got '800'" in load_error(
        tmp_path, toml_of(tokens=tokens)
    )


def test_a_scenario_needs_one_model_of_how_proposals_fare(tmp_path: Path) -> None:
    message = load_error(tmp_path, toml_of(acceptance=None))
    assert "is missing acceptance: add [acceptance]" in message and "or a [quality]" in message
    both = toml_of(quality={"seed_score": 0.5})
    assert "not both" in load_error(tmp_path, both)


def test_the_seeds_measured_validation_round_trips(tmp_path: Path) -> None:
    measured = [0, 1 / 3, 1, 2 / 3] * 5
    quality = {"seed_score": 0.55, "metric": "graded", "levels": 3, "seed_validation": measured}
    path = tmp_path / "q.toml"
    path.write_text(tomli_w.dumps(toml_of(acceptance=None, quality=quality)), encoding="utf-8")
    scenario = Scenario.load(path)
    assert scenario.quality is not None and scenario.quality.seed_validation == tuple(measured)
    scenario.save(tmp_path / "again.toml")
    assert Scenario.load(tmp_path / "again.toml") == scenario
    assert "seed_validation" not in Quality(0.5).to_dict()  # unknown: not written


def test_the_quality_model_round_trips(tmp_path: Path) -> None:
    quality = {"seed_score": 0.55, "metric": "graded", "levels": 3, "eval_noise": 0.2}
    path = tmp_path / "q.toml"
    path.write_text(tomli_w.dumps(toml_of(acceptance=None, quality=quality)), encoding="utf-8")
    scenario = Scenario.load(path)
    assert scenario.quality is not None and scenario.quality.levels == 3
    again = tmp_path / "again.toml"
    scenario.save(again)
    assert Scenario.load(again) == scenario


@pytest.mark.parametrize(
    ("quality", "message"),
    [
        ({}, "[quality] needs seed_score"),
        ({"seed_score": 1.2}, "quality seed_score must be between 0 and 1"),
        ({"seed_score": 0.5, "metric": "ranked"}, "quality metric is one of binary, graded"),
        ({"seed_score": 0.5, "metric": "graded"}, "quality levels must be >= 2"),
        ({"seed_score": 0.5, "levels": 3}, "quality levels applies to a graded metric only"),
        ({"seed_score": 0.5, "ceiling": 0}, "quality ceiling must be in (0, 1]"),
        ({"seed_score": 0.5, "inherit": 1.0}, "quality inherit must be a probability in [0, 1)"),
        ({"seed_score": 0.5, "change_sd": -1}, "quality change_sd must be a number >= 0"),
        ({"seed_score": 0.5, "steps": 1}, "[quality] has an unknown field 'steps'"),
        (
            {"seed_score": 0.5, "seed_validation": [0.5]},
            "quality seed_validation holds 0.5: each score must be 0 or 1 for a binary metric",
        ),
        (
            {"seed_score": 0.5, "seed_validation": "1,0"},
            "[quality] seed_validation must be a list of scores",
        ),
        (
            {"seed_score": 0.5, "seed_validation": [1, 0]},
            "quality seed_validation holds 2 "
            "scores, one per validation example, but valset_size is 20",
        ),
    ],
)
def test_a_bad_quality_model_is_named(quality: dict, message: str, tmp_path: Path) -> None:
    assert load_error(tmp_path, toml_of(acceptance=None, quality=quality)).startswith(message)


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
        ({"skip_perfect": 1.0}, "skip_perfect must be a probability in [0, 1)"),
        ({"acceptance": {"a0": 0.5, "tau": 0}}, "acceptance tau must be > 0"),
        ({"acceptance": {"tau": 3}}, "[acceptance] needs a0"),
        ({"rollout": {"dist": "empirical", "samples": []}}, "non-empty 'samples'"),
        ({"rollout": {"dist": "empirical", "samples": [1, -2]}}, "samples[1] is -2.0: samples"),
        ({"rollout": {"dist": "norm", "loc": 1, "scale": 1}}, "no negative values"),
        ({"rollout": {"dist": "lognorm", "s": "wide"}}, "parameter(s) s must be numbers"),
        ({"rollout": {"dist": "lognorm"}}, "bad parameters for lognorm"),
        ({"load": {"task": {"servers": 0}}}, "load.task.servers must be a whole number >= 1"),
        ({"load": {"reflection": {"slowdown": -1}}}, "load.reflection.slowdown must be a number"),
        ({"load": {"task": {"server": 2}}}, "unknown field 'server' (did you mean 'servers'?)"),
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
    gamma = Distribution("gamma", {"a": 3.0, "scale": 2.0})
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


def test_load_defaults_to_no_limit_and_is_not_written_unset() -> None:
    """A scenario without [load] has no limit, and writes none."""
    data = make_scenario().to_dict()
    assert "load" not in data
    scenario = Scenario.from_dict(data)
    assert scenario.loads == Loads()


def test_a_prefix_cache_round_trips_and_is_refused_where_it_means_nothing(
    tmp_path: Path,
) -> None:
    cached = make_scenario(loads=Loads(Load(), Load(servers=2, prefix_seconds=0.8)))
    path = tmp_path / "cached.toml"
    cached.save(path)
    assert Scenario.load(path) == cached
    assert cached.to_dict()["load"] == {"reflection": {"servers": 2, "prefix_seconds": 0.8}}
    base = make_scenario().to_dict()
    cases = {
        "needs load.reflection.servers": {"reflection": {"prefix_seconds": 0.8}},
        "for reflections only": {"task": {"servers": 2, "prefix_seconds": 0.8}},
        "must be a number >= 0": {"reflection": {"servers": 2, "prefix_seconds": -1}},
    }
    for problem, load in cases.items():
        message = load_error(tmp_path, base | {"load": load})
        assert problem in message and "prefix_seconds" in message, message
    limited = base | {
        "load": {"reflection": {"servers": 2, "prefix_seconds": 0.8}},
        "rate_limits": {"reflection": {"rpm": 60}},
    }
    assert "not modelled together" in load_error(tmp_path, limited)


def test_a_run_spread_round_trips_and_is_refused_out_of_range(tmp_path: Path) -> None:
    spread = make_scenario(loads=Loads(Load(run_spread=0.3), Load(servers=2, run_spread=0.1)))
    path = tmp_path / "spread.toml"
    spread.save(path)
    assert Scenario.load(path) == spread
    assert spread.to_dict()["load"] == {
        "task": {"run_spread": 0.3},
        "reflection": {"servers": 2, "run_spread": 0.1},
    }
    assert spread.loads.varies_by_run and not make_scenario().loads.varies_by_run
    base = make_scenario().to_dict()
    for value, problem in ((-0.1, "must be a number >= 0"), (1.5, "must be at most 1")):
        message = load_error(tmp_path, base | {"load": {"task": {"run_spread": value}}})
        assert problem in message and "load.task.run_spread" in message, message


def test_prompt_lengths_round_trip_and_each_mistake_is_named(tmp_path: Path) -> None:
    prompt = make_scenario(prompt=PromptLengths(0.8, (1.0, 1.7, 0.9)))
    path = tmp_path / "prompt.toml"
    prompt.save(path)
    assert Scenario.load(path) == prompt
    assert prompt.to_dict()["prompt"] == {"exponent": 0.8, "lengths": [1.0, 1.7, 0.9]}
    assert "prompt" not in make_scenario().to_dict()  # unset, unwritten
    base = make_scenario().to_dict()
    for table, problem in (
        ({"exponent": -0.5, "lengths": [1.0]}, "prompt.exponent must be in [0, 3]: got -0.5"),
        ({"exponent": 1, "lengths": []}, "prompt.lengths must be a non-empty list"),
        ({"exponent": 1, "lengths": [1.0, 0]}, "prompt.lengths must be a non-empty list"),
        ({"exponent": 1, "lengths": ["long"]}, "prompt.lengths must be a list of numbers"),
        ({"exponent": "steep", "lengths": [1]}, "prompt.exponent must be a number"),
        ({"lengths": [1.0]}, "[prompt] is missing field(s) exponent"),
        ({"exponent": 1, "lengths": [1], "slope": 2}, "unknown field 'slope'"),
    ):
        message = load_error(tmp_path, base | {"prompt": table})
        assert problem in message, message
        assert "\n" not in message


def test_a_run_factor_has_mean_one_and_the_spread_as_its_log_sd() -> None:
    load = Load(run_spread=0.4)
    z = np.random.default_rng(7).standard_normal(200_000)
    factors = np.array([load.run_factor(x) for x in z])
    assert factors.mean() == pytest.approx(1.0, abs=0.005)
    assert np.log(factors).std() == pytest.approx(0.4, rel=0.01)
    assert Load().run_factor(2.5) == 1.0


TOKENS = Tokens(
    rollout_input=Distribution("empirical", samples=(80.0, 120.0)),
    rollout_output=Distribution("gamma", {"a": 2.0, "scale": 10.0}),
    reflection_output=Distribution("empirical", samples=(300.0,)),
    reflection_input_base=500.0,
    reflection_input_per_example=120.0,
    measured_minibatch=3,
    reflection_seconds_per_input_token=0.002,
)


def test_tokens_prices_and_limits_round_trip(tmp_path: Path) -> None:
    scenario = make_scenario(
        tokens=TOKENS,
        prices=Prices(0.4, 1.6, 1.25, 10.0, task_model="a", reflection_model="b"),
        rate_limits=RateLimits(RateLimit(rpm=500, tpm=2e5), RateLimit(rpm=50), burst_seconds=10),
    )
    path = tmp_path / "s.toml"
    scenario.save(path)
    assert Scenario.load(path) == scenario


def test_reflection_input_and_latency_grow_with_the_minibatch() -> None:
    assert TOKENS.reflection_input(5) == 500 + 120 * 5
    assert TOKENS.reflection_latency_shift(3) == 0.0
    assert TOKENS.reflection_latency_shift(5) == pytest.approx(0.002 * 120 * 2)
    assert TOKENS.reflection_latency_shift(1) == pytest.approx(-0.002 * 120 * 2)


def test_measured_minibatch_defaults_to_the_scenarios() -> None:
    data = make_scenario(minibatch=4, tokens=TOKENS).to_dict()
    del data["tokens"]["measured_minibatch"]
    assert Scenario.from_dict(data).tokens.measured_minibatch == 4


def test_prices_come_from_litellms_offline_table() -> None:
    prices = Prices.from_dict({"task_model": "gpt-4.1-mini", "reflection_output": 2.0})
    # litellm 1.110.2's table: gpt-4.1-mini at $0.40 in, $1.60 out per million tokens.
    assert (prices.task_input, prices.task_output) == (0.4, 1.6)
    assert (prices.reflection_input, prices.reflection_output) == (0.4, 2.0)
    assert prices.reflection_model == "gpt-4.1-mini"


def test_reflection_prices_given_by_hand_are_not_named_after_the_task_model() -> None:
    given = {"task_model": "gpt-4.1-mini", "reflection_input": 3.0, "reflection_output": 12.0}
    prices = Prices.from_dict(given)
    assert (prices.reflection_input, prices.reflection_output) == (3.0, 12.0)
    assert prices.reflection_model == "" and "reflection_model" not in prices.to_dict()
    assert Prices.from_dict(prices.to_dict()) == prices


def test_unknown_model_is_one_line_with_suggestions() -> None:
    with pytest.raises(PxnError, match=r"not in litellm.s price table; did you mean.*4\.1-mini"):
        Prices.from_dict({"task_model": "gpt-4.1-minii"})


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"prices": {"task_input": 1, "task_output": 1}}, "[prices] needs a [tokens] table"),
        ({"prices": {"task_input": 1}}, "give task_input and task_output"),
        ({"rate_limits": {"task": {"tpm": 1000}}}, "rate_limits.task.tpm counts tokens"),
        ({"rate_limits": {"task": {"rpm": 0}}}, "rate_limits.task.rpm must be > 0"),
        ({"rate_limits": {"task": {"rpn": 5}}}, "unknown field 'rpn' (did you mean 'rpm'?)"),
        ({"rate_limits": {"burst_seconds": -1}}, "burst_seconds must be > 0"),
        ({"tokens": {"rollout_input": {"dist": "empirical", "samples": [1]}}}, "missing field"),
    ],
)
def test_cost_and_limit_mistakes(changes: dict, fragment: str, tmp_path: Path) -> None:
    assert fragment in load_error(tmp_path, toml_of(**changes))


def test_token_mistakes_name_the_field(tmp_path: Path) -> None:
    tokens = TOKENS.to_dict() | {"reflection_input_per_example": -3}
    assert "tokens.reflection_input_per_example must be a number >= 0" in load_error(
        tmp_path, toml_of(tokens=tokens)
    )
    tokens = TOKENS.to_dict() | {"rollout_output": {"dist": "empirical", "samples": [-1]}}
    message = load_error(tmp_path, toml_of(tokens=tokens))
    assert "tokens.rollout_output samples[0] is -1.0: samples must be finite and >= 0 tokens" in (
        message
    )


# -- numbers that are no numbers, files that are no text -----------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"rollout": {"dist": "empirical", "samples": [1.0, 2.0, math.nan]}},
            "[rollout] samples[2] is nan: a scenario's numbers must be finite",
        ),
        (
            {"rollout": {"dist": "lognorm", "s": 0.5, "scale": math.inf}},
            "[rollout] scale is inf: a scenario's numbers must be finite",
        ),
        ({"stage_overhead": math.inf}, "stage_overhead is inf: a scenario's numbers"),
        ({"load": {"task": {"slowdown": -math.inf}}}, "[load.task] slowdown is -inf: "),
        (
            {
                "rollout": {
                    "dist": "lognorm",
                    "s": 0.5,
                    "scale": 2.0,
                    "phases": {"full_val": {"dist": "empirical", "samples": [math.inf]}},
                }
            },
            "[rollout.phases.full_val] samples[0] is inf",
        ),
        (
            {
                "uncertainty": {
                    "source": "t",
                    "draws": [{"rollout.scale": 2.0}, {"stage_overhead": math.nan}],
                }
            },
            "[uncertainty] draws[1].stage_overhead is nan",
        ),
    ],
    ids=["empirical sample", "scipy parameter", "top level", "load", "phase sample", "draw"],
)
def test_a_non_finite_number_is_named_by_its_table_and_index(
    changes: dict, message: str, tmp_path: Path
) -> None:
    # stage_overhead = inf and an infinite slowdown were once accepted, and made every
    # prediction infinite or NaN.
    assert message in load_error(tmp_path, toml_of(**changes))


def test_a_distribution_names_its_bad_sample_and_parameter() -> None:
    with pytest.raises(PxnError, match=r"^rollout samples\[1\] is nan: samples must be finite"):
        Distribution("empirical", samples=(1.0, math.nan)).validate("rollout")
    # An infinite scale on an empirical sample passed every check, and every draw was inf.
    with pytest.raises(PxnError, match=r"^rollout scale must be a finite number: got inf$"):
        Distribution("empirical", {"scale": math.inf}, samples=(1.0,)).validate("rollout")


def test_a_parameter_scipy_overflows_on_is_one_line_with_no_warning(
    recwarn: pytest.WarningsRecorder,
) -> None:
    with pytest.raises(PxnError, match="must have a finite mean"):
        Distribution("gamma", {"a": 2.0, "scale": 1e308}).validate("rollout")
    assert [str(w.message) for w in recwarn] == []


@pytest.mark.parametrize(
    "content",
    [bytes(range(256)), b'name = "x"\x00\n', b"\x89PNG\r\n\x1a\n\x00\x00"],
    ids=["not utf-8", "nul in utf-8", "png"],
)
def test_a_binary_file_is_not_a_toml_text_file(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_bytes(content)
    with pytest.raises(PxnError) as caught:
        Scenario.load(path)
    assert str(caught.value) == f"scenario {path} is not a TOML text file (it holds binary data)"
