"""A candidate's prompt length scales its rollouts: simulated, and fitted from traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sim_helpers import fixed, make_scenario

from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.calibrate.traces.prompt_lengths import candidate_lengths, fit_prompt_lengths
from pxn.calibrate.traces.units import Calls
from pxn.prompt_lengths import PromptLengths
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import Rollout, TraceWriter
from pxn.trace_reading import read_one

ROOT = Path(__file__).resolve().parents[1]
DSPY_RUN = ROOT / "experiments" / "past_runs" / "dspy" / "runs" / "1x1-s0"


def test_a_proposals_rollouts_take_its_length_to_the_exponent(tmp_path: Path) -> None:
    """With every rollout 1 s and every proposal twice the seed's prompt at exponent 0.5, the
    seed's rollouts take 1 s and every other candidate's sqrt(2) s, whatever its phase."""
    scenario = make_scenario(rollout=fixed(1.0), prompt=PromptLengths(0.5, (2.0,)))
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as writer:
        simulate_once(scenario, Shape.parse("2x2"), 0, writer)
    durations: dict[bool, set[float]] = {True: set(), False: set()}
    phases = set()
    for rollout in read_one(path).of(Rollout):
        durations[rollout.candidate == "0"].add(round(rollout.duration, 9))
        if rollout.candidate != "0":
            phases.add(rollout.phase)
    assert durations[True] == {1.0}
    assert durations[False] == {round(2**0.5, 9)}
    assert {"child_minibatch", "full_val", "parent_minibatch"} <= phases  # joined ones keep it


def test_a_scenario_whose_prompts_never_change_runs_as_without_them() -> None:
    plain = make_scenario()
    same = plain.replace(prompt=PromptLengths(1.3, (1.0,)))
    flat = plain.replace(prompt=PromptLengths(0.0, (1.5, 2.0)))
    for r in range(3):
        expected = simulate_once(plain, Shape.parse("2x2"), r)
        assert simulate_once(same, Shape.parse("2x2"), r) == expected
        assert simulate_once(flat, Shape.parse("2x2"), r) == expected


def test_longer_proposals_make_a_run_slower() -> None:
    plain = make_scenario()
    longer = plain.replace(prompt=PromptLengths(1.0, (1.5, 2.5)))

    def mean_wall_clock(scenario) -> float:
        runs = [simulate_once(scenario, Shape.parse("1x1"), r) for r in range(20)]
        return float(np.mean([run.wall_clock for run in runs]))

    assert mean_wall_clock(longer) > 1.2 * mean_wall_clock(plain)


def rollout(candidate: str, example: str, phase: str, tokens: int, seconds: float, at: float):
    return Rollout(start=at, end=at + seconds, iteration=1, phase=phase, worker=0,
                   candidate=candidate, example=example, tokens_in=tokens)  # fmt: skip


class OneRun:
    """The fit reads a trace's rollouts only."""

    def __init__(self, rollouts: list[Rollout]):
        self.rollouts = rollouts

    def of(self, kind):
        return self.rollouts if kind is Rollout else []


def calls_of(rollouts: list[Rollout]) -> Calls:
    n = len(rollouts)
    return Calls(
        kind=np.full(n, "rollout"), phase=np.array([r.phase for r in rollouts]),
        load=np.ones(n), latency=np.array([r.duration for r in rollouts]),
        minibatch=np.full(n, 3), censored=np.zeros(n, bool),
        event=np.array(rollouts, dtype=object),
        tokens_in=np.array([np.nan if r.tokens_in is None else r.tokens_in for r in rollouts]),
        tokens_out=np.full(n, np.nan),
        run=np.zeros(n, int), wait=np.zeros(n),
    )  # fmt: skip


@pytest.mark.parametrize("exponent", [0.0, 0.7, 1.4])
def test_the_exponent_is_recovered_from_rollouts_of_known_lengths(exponent: float) -> None:
    """Each example's own text divides out of a candidate's length; the slope of log latency
    on log length is the exponent, within three of its standard errors."""
    rng = np.random.default_rng(5)
    examples = {f"train/{i}": 200 + 40 * i for i in range(6)}  # the seed's tokens on each
    truth = {"0": 1.0, "1-0": 1.6, "2-0": 0.9, "3-0": 2.2, "4-0": 1.3}
    rollouts, at = [], 0.0
    for candidate, length in truth.items():
        phase = "parent_minibatch" if candidate == "0" else "child_minibatch"
        for example, tokens in examples.items():
            for _ in range(4):
                seconds = 2.0 * length**exponent * rng.lognormal(0, 0.2)
                rollouts.append(
                    rollout(candidate, example, phase, round(tokens * length), seconds, at)
                )
                at += seconds  # fmt: skip
    lengths, proposed = candidate_lengths(OneRun(rollouts))
    assert proposed == ["1-0", "2-0", "3-0", "4-0"]
    assert lengths == pytest.approx(truth, abs=0.01)
    fit = fit_prompt_lengths([OneRun(rollouts)], calls_of(rollouts))
    assert abs(fit.exponent - exponent) < 3 * fit.stderr
    assert fit.lengths == pytest.approx([1.6, 0.9, 2.2, 1.3], abs=0.01)
    assert (fit.chosen is not None) == (exponent > 0)  # a flat latency writes no [prompt]
    if fit.chosen is not None:
        assert fit.chosen.exponent == pytest.approx(fit.exponent)


def test_rollouts_without_token_counts_write_no_prompt_table() -> None:
    rollouts = [
        Rollout(
            start=0, end=1, iteration=1, phase="child_minibatch", worker=0, candidate=c, example="e"
        )
        for c in ("0", "1-0")
    ]
    fit = fit_prompt_lengths([OneRun(rollouts)], calls_of(rollouts))
    assert fit.chosen is None and not fit.lengths
    assert "no proposal's prompt tokens were recorded" in fit.reason


def test_a_real_dspy_run_whose_search_lengthened_its_prompt_is_fitted_so() -> None:
    """The past-runs study's dspy.GEPA calibration run (SmolLM2 on llama.cpp) accepted an
    instruction 1.7 times the seed's prompt: its rollouts' latency grows with the prompt,
    and the seed's latency, not the run's mix, is what [rollout] holds."""
    cal = calibrate_traces([DSPY_RUN], search="rates")
    fit = cal.prompt
    assert fit.chosen is not None and fit.exponent - 2 * fit.stderr > 0
    assert max(fit.lengths) > 1.5 and min(fit.lengths) < 1.1
    assert cal.scenario.rollout.mean() < np.mean([r.duration for r in cal.traces[0].of(Rollout)])
    assert cal.scenario.prompt == fit.chosen
