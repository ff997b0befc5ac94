"""dspy.GEPA recorded with one line (pxn.runner.dspy_recording): the real DSPy 3.4.1 and gepa
0.1.4, compiling a tiny project-made program against the local SmolLM2 pool.

The recorded trace is checked against gepa's own totals and against the run's shape (W =
DSPy's num_threads, one reflection at a time, reflections never during rollouts), and
`pxn calibrate` turns it into a scenario. A user's script (dspy_program.py) stopped by
Ctrl-C leaves a trace the same script resumes. SmolLM2-135M rarely writes the field format DSPy
asks for, so most rollouts score 0 and most reflections fail: the plumbing and the
latencies are real, the optimization is not the point. No timing is asserted, but for
the one lower bound sleeps set: a stage lasts at least the rounds of rollouts DSPy's
split of the threads forces (and less than one round more).

That recording leaves DSPy's scheduling as it was is checked without the pool, on DSPy's own
DummyLM, with rollouts that wait for each other so that the threads DSPy gives each
candidate are all busy at once.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dspy
import gepa
import pytest
from conftest import run_pxn
from dspy.utils import DummyLM
from dspy_program import Topic, examples, local_lm, metric, optimizer
from gepa.strategies.proposal_sampling import PxNSampling
from record_helpers import check_prefixes

from pxn.calibrate.traces.units import cut_into_units
from pxn.distribution import Distribution
from pxn.errors import PxnError
from pxn.load import Loads
from pxn.runner.dspy_recording import recorded
from pxn.runner.recording.totals import max_concurrency, trace_totals
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import Decision, Merge, Reflection, Resume, Rollout, RunEnd, Stage, TraceWriter
from pxn.trace_reading import Trace, read_trace

PROGRAM = Path(__file__).parent / "dspy_program.py"


def overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


UNREACHABLE = "http://127.0.0.1:9/v1"  # no LM call is made by the tests that use it


def test_only_a_dspy_gepa_is_recorded(tmp_path):
    with pytest.raises(PxnError) as caught:
        recorded(dspy.BootstrapFewShot(metric=metric), tmp_path / "run")
    assert caught.value.subject == "optimizer" and "BootstrapFewShot" in str(caught.value)


def test_a_directory_holding_a_trace_is_refused_and_gepa_left_as_it_was(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "trace.jsonl").write_text("earlier run\n")
    original = gepa.optimize
    opt = recorded(optimizer(local_lm(UNREACHABLE, 8)), out)
    with dspy.context(lm=local_lm(UNREACHABLE, 8)), pytest.raises(PxnError) as caught:
        opt.compile(dspy.Predict(Topic), trainset=examples("train", 3))
    assert "already holds a trace" in str(caught.value)
    assert gepa.optimize is original
    assert (out / "trace.jsonl").read_text() == "earlier run\n"
    # Everything but compile is the optimizer's own.
    assert opt.max_metric_calls == 30 and opt.num_threads == 2


class Gate:
    """Counts each candidate's rollouts in flight (a candidate known by its instruction), and
    holds the first `threads` rollouts of children until all of them are in flight."""

    def __init__(self, threads: int):
        self.barrier = threading.Barrier(threads)
        self.threads = threads
        self.lock = threading.Lock()
        self.held = 0
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    @contextmanager
    def rollout(self, instruction: str) -> Iterator[None]:
        with self.lock:
            self.now[instruction] += 1
            self.most[instruction] = max(self.most[instruction], self.now[instruction])
            hold = instruction != Topic.instructions and self.held < self.threads
            self.held += hold
        try:
            if hold:
                self.barrier.wait(timeout=60)  # only a broken run waits that long
            yield
        finally:
            with self.lock:
                self.now[instruction] -= 1

    def children(self) -> list[int]:
        """The most rollouts each child had in flight, in increasing order."""
        return sorted(n for text, n in self.most.items() if text != Topic.instructions)


class Gated(dspy.Module):
    """The topic labeller, each call passing through the gate (a class attribute: DSPy copies
    the program per candidate, and the gate must stay one)."""

    gate: Gate

    def __init__(self):
        super().__init__()
        self.predict = dspy.Predict(Topic)

    def forward(self, sentence: str) -> dspy.Prediction:
        with self.gate.rollout(self.predict.signature.instructions):
            return self.predict(sentence=sentence)


THREADS = 4


PROPOSALS = [{"new_instruction": f"Name the topic (try {i})."} for i in range(20)]


def compile_gated(
    out: Path | None, monkeypatch, replies: list[dict[str, str]] = PROPOSALS
) -> tuple[Gate, Any, Any]:
    """One 1x3 step at num_threads 4 on DummyLMs, recorded into `out` (None: not recorded):
    the seed's validation, the parent's minibatch and three children's. `replies`: the
    reflection LM's, in order."""
    gate = Gate(THREADS)
    monkeypatch.setattr(Gated, "gate", gate, raising=False)
    task = DummyLM({"": {"topic": "none"}})  # never right: no parent is skipped as perfect
    # JSON: the form DSPy's instruction proposer reads.
    proposals = DummyLM(replies, adapter=dspy.JSONAdapter())
    for lm in (task, proposals):
        lm.cache = False  # DummyLM answers every call itself; it only says it caches
    opt = optimizer(
        proposals,
        num_threads=THREADS,
        max_metric_calls=16,
        gepa_kwargs={"sampling_strategy": PxNSampling(1, 3)},
    )
    if out is not None:
        opt = recorded(opt, out)
    with dspy.context(lm=task):
        program = opt.compile(Gated(), trainset=examples("train", 6), valset=examples("val", 4))
    return gate, opt, program


def most_in_flight_per_child(trace: Trace) -> list[int]:
    children = [r for r in trace.of(Rollout) if r.phase == "child_minibatch"]
    by_child = {
        c: [r for r in children if r.candidate == c] for c in {r.candidate for r in children}
    }
    return sorted(max_concurrency(rollouts) for rollouts in by_child.values())


def test_a_stage_is_scheduled_as_dspy_splits_its_threads(tmp_path: Path, monkeypatch):
    """Three children at num_threads 4: DSPy runs each child's evaluation with its share of
    the threads (2, 1 and 1). Recorded, each child has as many rollouts in flight as it
    has unrecorded, and the trace shows that; its totals are gepa's."""
    unrecorded, _, _ = compile_gated(None, monkeypatch)
    split = unrecorded.children()
    assert split == [1, 1, 2]  # DSPy's divmod(4, 3), every thread busy at the gate

    gate, opt, program = compile_gated(tmp_path / "run", monkeypatch)
    assert gate.children() == split
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    assert most_in_flight_per_child(trace) == split
    rollouts = trace.of(Rollout)
    assert max_concurrency([r for r in rollouts if r.phase == "child_minibatch"]) == THREADS
    assert {r.worker for r in rollouts} <= set(range(THREADS))

    run = opt.result
    assert run.status == "completed" and run.mismatches == (), run
    assert len(rollouts) == program.detailed_results.total_metric_calls == run.metric_calls
    assert trace.run_start.workers == THREADS and trace.run_start.shape == "1x3"
    # DSPy's defaults, recorded as they ran: merge on, for a program of one predictor.
    merge_setup = {k: trace.run_start.meta[k] for k in ("use_merge", "max_merge_invocations")}
    assert merge_setup == {"use_merge": True, "max_merge_invocations": 5}
    assert trace.run_start.meta["components"] == 1
    assert all(r.error is None and r.example.startswith(("train/", "val/")) for r in rollouts)
    # One reflection per child, one at a time, each with its own proposal id.
    reflections = trace.of(Reflection)
    assert [r.proposal for r in reflections] == ["1-0", "1-1", "1-2"]
    assert all(a.end <= b.start for a, b in itertools.pairwise(reflections))
    assert trace.run_start.reflection_concurrency == 1


def test_a_proposal_dspy_could_not_parse_keeps_the_proposal_ids(tmp_path: Path, monkeypatch):
    """The reflection LM's second reply lacks the field DSPy's proposer reads: gepa drops the
    step's first pass and asks DSPy again for all three proposals. Each event carries its
    proposal's id, and calibration counts three tasks that reached a reflection."""
    unreadable = {"reasoning": "no instruction here"}
    _, opt, _ = compile_gated(tmp_path / "run", monkeypatch, [PROPOSALS[0], unreadable, *PROPOSALS])
    assert opt.result.status == "completed" and opt.result.mismatches == ()
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    reflections = trace.of(Reflection)
    assert [r.proposal for r in reflections] == ["1-0", "1-1", "1-0", "1-1", "1-2"]
    assert [r.error is not None for r in reflections] == [False, True, False, False, False]
    assert sorted(d.proposal for d in trace.of(Decision)) == ["1-0", "1-1", "1-2"]
    units = cut_into_units([trace])
    assert units.reflected.sum() == 3 == units.tasks.sum()


class TwoSteps(dspy.Module):
    """Two predictors: an auto budget grows with them."""

    def __init__(self):
        super().__init__()
        self.first = dspy.Predict(Topic)
        self.second = dspy.Predict(Topic)

    def forward(self, sentence: str) -> dspy.Prediction:
        return self.second(sentence=self.first(sentence=sentence).topic)


@pytest.mark.parametrize(
    ("budget", "given"),
    [("auto:light", {"auto": "light"}), ("full-evals:3", {"max_full_evals": 3})],
)
def test_a_dspy_budget_is_recorded_with_where_it_came_from(tmp_path: Path, budget, given):
    """dspy.GEPA(auto="light") hands gepa the metric calls DSPy works out: run_start holds
    them, and its meta the budget as given and the program's predictors."""
    from pxn.budget import metric_calls_of

    task = DummyLM({"": {"topic": "none"}})
    task.cache = False
    stopped_at_once = {"stop_callbacks": [lambda state: True]}  # the seed's validation only
    made = optimizer(DummyLM([]), max_metric_calls=None, gepa_kwargs=stopped_at_once, **given)
    opt = recorded(made, tmp_path / "run")
    train, val = examples("train", 6), examples("val", 4)
    with dspy.context(lm=task):
        opt.compile(TwoSteps(), trainset=train, valset=val)
    start = read_trace(tmp_path / "run" / "trace.jsonl").run_start
    assert start.budget == opt.max_metric_calls  # what DSPy handed gepa
    assert start.budget == metric_calls_of(
        budget, predictors=2, valset_size=len(val), trainset_size=len(train)
    )
    assert start.meta["budget_from"] == budget and start.meta["predictors"] == 2


def test_an_auto_level_dspy_lacks_is_refused_before_anything_runs(tmp_path: Path):
    with pytest.raises(PxnError, match="auto:superheavy is not one of DSPy's: auto:light"):
        recorded(optimizer(DummyLM([]), max_metric_calls=None, auto="superheavy"), tmp_path)


@pytest.mark.lm
@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "gepa_kwargs", "budget"),
    # 2x2 at 16 metric calls: the seed's validation and one batched step.
    [("1x1", {}, 30), ("2x2", {"sampling_strategy": PxNSampling(2, 2)}, 16)],
)
def test_a_compile_is_recorded_as_gepa_ran_it_and_calibrates(
    tmp_path: Path, lm_pool, shape, gepa_kwargs, budget
):
    out = tmp_path / "run"
    task_server, reflection_server = (s.api_base for s in lm_pool.servers[:2])
    original = gepa.optimize
    opt = recorded(
        optimizer(
            local_lm(reflection_server, 150), max_metric_calls=budget, gepa_kwargs=gepa_kwargs
        ),
        out,
        # SmolLM2 rarely writes the JSON DSPy's proposer asks for: let the run spend its
        # budget however many reflections fail in a row.
        max_reflection_failures=100,
    )
    with dspy.context(lm=local_lm(task_server, 16)):
        program = opt.compile(
            dspy.Predict(Topic), trainset=examples("train", 6), valset=examples("val", 4)
        )
    assert gepa.optimize is original
    gepa_result = program.detailed_results
    run = opt.result
    assert run.status == "completed" and run.mismatches == (), run
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == [] and isinstance(trace.events[-1], RunEnd)

    # The trace's totals are gepa's.
    rollouts = trace.of(Rollout)
    totals = trace_totals(trace)
    assert len(rollouts) == gepa_result.total_metric_calls == run.metric_calls
    assert totals.full_val_evals == gepa_result.num_full_val_evals
    assert totals.accepted == run.accepted
    assert run.accepted + run.merges_accepted == len(gepa_result.candidates) - 1
    assert run.iterations >= 1
    # DSPy's defaults ran unchanged: gepa's merge on, its merges (if any) in the trace.
    assert trace.run_start.meta["use_merge"] is True
    assert len(trace.of(Merge)) == run.merges

    # W is DSPy's num_threads: declared, and never exceeded.
    start = trace.run_start
    assert start.shape == shape and start.budget == budget
    assert start.workers == 2 and start.valset_size == 4 and start.trainset_size == 6
    assert start.meta["dspy"] == "3.4.1" and start.meta["dspy_cache"] is False
    assert max_concurrency(rollouts) <= 2 and {r.worker for r in rollouts} <= {0, 1}
    assert {r.example for r in rollouts if r.phase == "seed_val"} == {f"val/{i}" for i in range(4)}
    # DSPy's usage reached the rollouts it ran in (a program that raised has none).
    assert any(r.tokens_in and r.tokens_out for r in rollouts)

    # Each rollout lies inside a stage of its own phase and iteration.
    stages = trace.of(Stage)
    for r in rollouts:
        assert any(
            (s.name, s.iteration) == (r.phase, r.iteration) and s.start <= r.start <= r.end <= s.end
            for s in stages
        ), r

    # gepa asks DSPy's proposer for one proposal at a time, between the minibatches.
    reflections = trace.of(Reflection)
    assert start.reflection_concurrency == 1
    assert reflections and len(reflections) >= run.proposals
    assert not any(overlap(a, b) for a, b in itertools.combinations(reflections, 2))
    assert not any(overlap(f, r) for f in reflections for r in rollouts)
    assert any(f.tokens_in for f in reflections)
    # DSPy's prompts reach the recorder: a 2x2 step's siblings share their prompt's prefix,
    # all of it where they share their minibatch (6 examples are 2 chunks of b = 3).
    assert check_prefixes(reflections, chunks=2) > 0 or shape == "1x1"

    # The round trip: the trace calibrates into a scenario of the same pool. SmolLM2 at
    # temperature 1 now and then writes no parsable reply in a short run's few reflections,
    # or a usable one whose child never reaches gepa's judgement in so short a run: with no
    # judged proposal calibrate must refuse, in one line naming why (the DummyLM test below
    # always calibrates).
    ran = run_pxn("calibrate", out, "-o", tmp_path / "calibrated.toml", "--jobs", "1")
    if not trace.live(Decision):
        assert ran.returncode == 2 and not (tmp_path / "calibrated.toml").exists()
        assert "no judged proposals (decision events)" in ran.stderr, ran.stderr
        if all(f.error for f in reflections):
            assert f"all {len(reflections)} reflection(s) failed" in ran.stderr, ran.stderr
            assert "give the reflection LM room" in ran.stderr
        return
    assert ran.returncode == 0, ran.stderr
    scenario = Scenario.load(tmp_path / "calibrated.toml")
    assert scenario.workers == 2 and scenario.valset_size == 4 and scenario.trainset_size == 6
    assert scenario.reflection_concurrency == 1


def ctrl_c_as_a_terminal_gives_it() -> None:
    """In the child before exec: SIGINT at its default and unblocked (an ignored SIGINT
    survives exec, and Python installs its Ctrl-C handler only where it is not ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def user_script(out: Path, lm_pool, *flags: str) -> subprocess.CompletedProcess[str]:
    task_server, reflection_server = (s.api_base for s in lm_pool.servers[:2])
    return subprocess.run(
        [sys.executable, str(PROGRAM), str(out), task_server, reflection_server, *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        preexec_fn=ctrl_c_as_a_terminal_gives_it,
    )


@pytest.mark.lm
@pytest.mark.slow
def test_ctrl_c_leaves_a_trace_the_same_script_resumes(tmp_path: Path, lm_pool):
    out = tmp_path / "run"
    first = user_script(out, lm_pool, "--ctrl-c-after", "9")
    assert first.returncode == -signal.SIGINT, first.stderr[-2000:]
    interrupted = read_trace(out / "trace.jsonl")
    end = interrupted.run_end
    assert end is not None and end.status == "interrupted"
    # Only rollouts that ran are in flight: W stays num_threads.
    assert end.workers == max_concurrency(interrupted.of(Rollout)) <= 2

    second = user_script(out, lm_pool, "--resume")
    assert second.returncode == 0, second.stderr[-2000:]
    run = json.loads(second.stdout.splitlines()[-1])
    assert run["status"] == "completed" and run["mismatches"] == []
    trace = read_trace(out / "trace.jsonl")
    assert len(trace.of(Resume)) == 1 and trace.run_end.status == "completed"
    # Whole-run totals: the work the interrupt threw away is not counted twice.
    assert run["metric_calls"] == len(trace.live(Rollout)) >= 30


class Sleeping(dspy.Module):
    """The topic labeller taking a known time per rollout (a sleep: the work's latency)."""

    seconds = 0.3

    def __init__(self):
        super().__init__()
        self.predict = dspy.Predict(Topic)

    def forward(self, sentence: str) -> dspy.Prediction:
        time.sleep(self.seconds)
        return self.predict(sentence=sentence)


def test_dspys_split_of_the_threads_is_what_the_simulator_models(tmp_path: Path):
    """One 4x1 step at num_threads 6 on DummyLMs: the parent stage's 4 (seed, minibatch)
    pairs of 3 examples get 2, 2, 1 and 1 threads, so it lasts 3 rollouts, where 6 pooled
    workers would need 2. The recorded run calibrates to split workers, and the simulator
    with them gives the 3 rounds DSPy ran."""
    task = DummyLM({"": {"topic": "none"}})  # never right: nothing accepted, no full val
    proposals = DummyLM(PROPOSALS, adapter=dspy.JSONAdapter())
    for lm in (task, proposals):
        lm.cache = False
    opt = recorded(
        optimizer(
            proposals,
            num_threads=6,
            max_metric_calls=16,
            gepa_kwargs={"sampling_strategy": PxNSampling(4, 1)},
        ),
        tmp_path / "run",
    )
    with dspy.context(lm=task):
        opt.compile(Sleeping(), trainset=examples("train", 12), valset=examples("val", 4))
    assert opt.result.status == "completed" and opt.result.mismatches == ()
    [stage] = [s for s in read_trace(tmp_path / "run" / "trace.jsonl").of(Stage)
               if s.name == "parent_minibatch"]  # fmt: skip
    rounds = stage.duration / Sleeping.seconds
    assert 3 <= rounds < 3.9, rounds  # pooled: 2; the slack is DSPy's own work on a busy machine

    ran = run_pxn("calibrate", tmp_path / "run", "-o", tmp_path / "cal.toml", "--jobs", "1")
    assert ran.returncode == 0, ran.stderr
    calibrated = Scenario.load(tmp_path / "cal.toml")
    assert calibrated.worker_split == "per_candidate" and calibrated.workers == 6
    one_latency = calibrated.replace(
        rollout=Distribution("empirical", samples=(Sleeping.seconds,)),
        rollout_phases={},
        stage_overhead=0.0,
        uncertainty=None,
        loads=Loads(),
    )
    for split, expected in (("per_candidate", 3), ("pooled", 2)):
        path = tmp_path / f"{split}.jsonl"
        with TraceWriter(path) as writer:
            simulate_once(one_latency.replace(worker_split=split), Shape(4, 1), 0, writer)
        [first] = [s for s in read_trace(path).of(Stage)
                   if s.name == "parent_minibatch" and s.iteration == 1]  # fmt: skip
        assert first.duration == pytest.approx(expected * Sleeping.seconds), split


class Sure(dspy.Signature):
    """w0"""

    sentence: str = dspy.InputField()
    known: str = dspy.OutputField()


class AlsoSure(Sure):
    """w1"""


class TwoInstructions(dspy.Module):
    """Two predictors whose instructions are lists of words: a sentence (a word) is known when
    either instruction holds it, and nothing is when they hold both w10 and w11. No LM
    decides it; the predictors are called so that DSPy has their traces to reflect on."""

    def __init__(self):
        super().__init__()
        self.first = dspy.Predict(Sure)
        self.second = dspy.Predict(AlsoSure)

    def forward(self, sentence: str) -> dspy.Prediction:
        self.first(sentence=sentence)
        self.second(sentence=sentence)
        words = {w for p in (self.first, self.second) for w in p.signature.instructions.split()}
        known = sentence in words and not {"w10", "w11"} <= words
        return dspy.Prediction(known="yes" if known else "no")


def known_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    right = pred.known == "yes"
    return dspy.Prediction(score=float(right), feedback="known" if right else "unknown")


def words_of(parity: int, count: int) -> str:
    return " ".join(f"w{parity + 2 * i}" for i in range(count))


def test_a_compile_with_dspys_defaults_records_gepas_merges(tmp_path: Path):
    """dspy.GEPA as created, use_merge=True by default, on a program of two predictors: the
    reflection LM's replies are lists of even and odd words by turns, each longer than the
    last, so the seed's children know different words, and gepa merges two of them. The
    merge is in the trace, its subsample timed where DSPy ran it, and the totals are
    gepa's."""
    replies = [{"new_instruction": words_of(k % 2, k // 2 + 2)} for k in range(40)]
    proposals = DummyLM(replies, adapter=dspy.JSONAdapter())
    task = DummyLM({"": {"known": "no"}})
    for lm in (task, proposals):
        lm.cache = False
    optimizer = dspy.GEPA(
        metric=known_metric,
        max_metric_calls=200,
        reflection_lm=proposals,
        num_threads=2,
        track_stats=True,
        gepa_kwargs={"sampling_strategy": PxNSampling(2, 2)},
    )
    assert optimizer.use_merge and optimizer.max_merge_invocations == 5  # DSPy's defaults
    opt = recorded(optimizer, tmp_path / "run")
    words = [dspy.Example(sentence=f"w{i % 12}").with_inputs("sentence") for i in range(20)]
    with dspy.context(lm=task):
        program = opt.compile(TwoInstructions(), trainset=words[:12], valset=words[12:])
    run = opt.result
    assert run.status == "completed" and run.mismatches == (), run
    assert run.accepted + run.merges_accepted == len(program.detailed_results.candidates) - 1
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    assert trace.run_start.meta["components"] == 2
    [merge] = trace.of(Merge)
    assert merge.accepted and run.merges_accepted == 1
    subsample = [r for r in trace.of(Rollout) if r.phase == "merge_subsample"]
    assert len(subsample) == 5 and {r.candidate for r in subsample} == {merge.proposal}
    assert all(r.example.startswith("val/") and r.iteration == merge.iteration for r in subsample)
    assert merge.score_after == sum(r.score for r in subsample) >= merge.score_before
