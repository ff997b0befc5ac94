"""Proposals lost before gepa judged them (pxn.failures), as the simulator runs them: gepa's
passes over an iteration's reflections, the chances, the trace, and the round trip through
calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from calibrate_helpers import write_traces
from scipy.stats import binomtest
from sim_helpers import make_scenario, searched

from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.errors import PxnError
from pxn.failures import Failures
from pxn.run_summary import summarize
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.gepa_rules import ProposalTask, reflection_passes
from pxn.sim.model import simulate_once
from pxn.trace import NoProposal, Reflection, TraceWriter
from pxn.trace_reading import read_trace

SIGNIFICANCE = 0.001  # of each statistical test here (seeded)


def tasks(k: int) -> list[ProposalTask]:
    return [ProposalTask(str(j // 2), j, f"1-{j}") for j in range(k)]


class Fixed:
    """A generator stand-in whose `random` returns what the test says, in order."""

    def __init__(self, *rows: list[float]):
        self.rows = list(rows)

    def random(self, n: int) -> np.ndarray:
        row = self.rows.pop(0)
        assert len(row) == n
        return np.asarray(row)


def test_a_pass_without_a_failure_proposes_every_task():
    passes = reflection_passes(tasks(3), Failures(reflection=0.5), False, Fixed([0.9, 0.6, 0.7]))
    assert passes.first == tasks(3) and passes.retried == [] and passes.lost == []
    assert passes.proposing == tasks(3)


def test_a_failed_call_sends_gepa_back_to_every_task_one_at_a_time():
    """Calls at once: the whole first pass ran; the failed task's retry fails at `retry`, the
    others' at `reflection`."""
    failures = Failures(reflection=0.5, retry=0.9)
    passes = reflection_passes(tasks(3), failures, False, Fixed([0.9, 0.1, 0.7], [0.6, 0.6, 0.2]))
    assert passes.first == tasks(3) and passes.first_failed == [False, True, False]
    assert passes.retried == tasks(3)
    # Task 0 (0.6 >= 0.5) and task 2 (0.2 < 0.5) at `reflection`, task 1 (0.6 < 0.9) at `retry`.
    assert passes.retry_failed == [False, True, True]
    assert [t.proposal for t in passes.proposing] == ["1-0"]
    assert [t.proposal for t in passes.lost] == ["1-1", "1-2"]


def test_one_at_a_time_the_first_pass_stops_at_its_first_failure():
    passes = reflection_passes(
        tasks(4), Failures(reflection=0.5), True, Fixed([0.9, 0.1, 0.7, 0.8], [0.9] * 4)
    )
    assert passes.first == tasks(2) and passes.first_failed == [False, True]
    assert passes.retried == tasks(4) and passes.lost == []


def test_a_scenario_that_loses_nothing_simulates_to_the_bit_as_before():
    """[failures] at zero draws nothing: the replicate's streams are untouched."""
    for scenario in (make_scenario(budget=300), searched(budget=300)):
        explicit = scenario.replace(failures=Failures(dataset=0.0, reflection=0.0))
        for r in range(3):
            assert simulate_once(explicit, Shape(2, 2), r) == simulate_once(
                scenario, Shape(2, 2), r
            )


@pytest.mark.parametrize("quality", [False, True])
def test_lost_tasks_happen_at_their_chances(quality):
    """Single, C = 10: a task is lost before its reflection with chance d, else in it when its
    call and its retry both fail: d + (1 - d) r1 r2. Skipped tasks are neither."""
    failures = Failures(dataset=0.2, reflection=0.4, retry=0.75)
    base = searched(budget=400) if quality else make_scenario(budget=400, skip_perfect=0.1)
    scenario = base.replace(failures=failures)
    runs = [simulate_once(scenario, Shape(1, 1), r) for r in range(150)]
    lost = sum(r.failed for r in runs)
    kept = sum(r.failed + r.proposals for r in runs)
    expected = 0.2 + 0.8 * 0.4 * 0.75
    assert binomtest(lost, kept, expected).pvalue > SIGNIFICANCE, (lost / kept, expected)
    # A single iteration without a proposal is one whose task was skipped or lost.
    for run in runs:
        assert run.no_proposal_iterations == run.skipped + run.failed


def test_failed_reflections_cost_a_second_pass_one_at_a_time():
    """Every call fails, every retry too: each iteration runs its k calls at once, then k one
    at a time, and proposes nothing; only the parents' minibatches are paid for."""
    scenario = make_scenario(
        budget=200, skip_perfect=0.0, failures=Failures(reflection=1.0, retry=1.0)
    )
    run = simulate_once(scenario, Shape(2, 2), 0)
    assert run.proposals == 0 and run.accepted == 0 and run.failed == 4 * run.iterations
    assert run.no_proposal_iterations == run.iterations
    assert run.metric_calls == scenario.valset_size + run.iterations * 4 * scenario.minibatch
    ideal = make_scenario(budget=200, skip_perfect=0.0, acceptance=scenario.acceptance)
    assert (
        run.stage_time["reflection"] > simulate_once(ideal, Shape(2, 2), 0).stage_time["reflection"]
    )


def test_a_simulated_trace_tells_every_lost_task_and_summarizes_as_the_run(tmp_path):
    scenario = searched(budget=300, failures=Failures(dataset=0.3, reflection=0.5, retry=0.5))
    for r in range(4):
        path = tmp_path / f"r{r}.jsonl"
        with TraceWriter(path) as writer:
            run = simulate_once(scenario, Shape(2, 2), r, writer)
        trace = read_trace(path)
        summary = summarize(trace)
        for name in ("iterations", "proposals", "skipped", "failed", "no_proposal_iterations"):
            assert getattr(summary, name) == getattr(run, name), name
        lost = trace.of(NoProposal)
        assert {e.reason for e in lost} <= {"perfect_parent", "reflective_dataset",
                                            "reflection_failed"}  # fmt: skip
        failed_calls = [c for c in trace.of(Reflection) if c.error]
        for e in lost:
            if e.reason == "reflection_failed":  # its last call failed
                calls = [c for c in trace.of(Reflection) if (c.iteration, c.proposal) ==
                         (e.iteration, e.proposal)]  # fmt: skip
                assert calls and calls[-1].error
        assert failed_calls or not [e for e in lost if e.reason == "reflection_failed"]


def test_calibration_recovers_the_chances_it_was_simulated_with(tmp_path):
    truth = Failures(dataset=0.25, reflection=0.4, retry=0.8)
    scenario = make_scenario(budget=600, skip_perfect=0.1, failures=truth)
    paths = write_traces(tmp_path, scenario, Shape(2, 2), range(4))
    calibration = calibrate_traces(paths, search="rates")
    fitted, counts = calibration.failures.failures, calibration.failures.counts
    assert binomtest(counts["dataset_lost"], counts["reached"], 0.25).pvalue > SIGNIFICANCE
    assert binomtest(counts["first_failed"], counts["first_tries"], 0.4).pvalue > SIGNIFICANCE
    assert binomtest(counts["retry_failed"], counts["retries"], 0.8).pvalue > SIGNIFICANCE
    assert calibration.scenario.failures == fitted
    # Losses are not skips: the skip share stays the perfect parents'.
    assert math.isclose(calibration.scenario.skip_perfect, 0.1, abs_tol=0.06)


def test_a_failures_table_round_trips_and_refuses_nonsense(tmp_path):
    scenario = make_scenario(failures=Failures(dataset=0.1, reflection=0.5))
    path = tmp_path / "s.toml"
    scenario.save(path)
    assert Scenario.load(path).failures == scenario.failures
    assert "[failures]" not in make_scenario().to_toml()
    data = scenario.to_dict() | {"failures": {"reflection": 1.5}}
    with pytest.raises(PxnError, match=r"failures\.reflection"):
        Scenario.from_dict(data)
    with pytest.raises(PxnError, match="unknown field 'reflections'"):
        Scenario.from_dict(scenario.to_dict() | {"failures": {"reflections": 0.5}})


def test_dspy_gepa_reflects_one_at_a_time():
    with pytest.raises(PxnError, match="one text at a time"):
        make_scenario(optimizer="dspy.GEPA", reflection_concurrency=4)
    scenario = make_scenario(optimizer="dspy.GEPA", reflection_concurrency=1)
    assert scenario.to_dict()["optimizer"] == "dspy.GEPA"
