"""The recorder used as people really use it, wrongly included: every misuse and fault ends in
one clear line or in a trace that `pxn calibrate` reads, calibrating what it supports.

Real gepa 0.1.4 runs with the tests' own small adapters and reflection LMs
(record_helpers.py), and real DSPy 3.4.1 compiles on DSPy's DummyLMs. A
misuse of the recorder's or gepa's arguments is a PxnError naming the
argument before anything is created. A run that fails, is interrupted or is
cut short leaves a trace that `pxn calibrate` either calibrates, saying what
the run lacked, or refuses in one line saying how the run ended (exit code
2, no traceback, no scenario file written).
docs/recording.md's table lists these cases and what each gives.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import gepa
import pytest
from conftest import assert_user_error, run_pxn
from dspy.utils import DummyLM
from dspy_program import Topic, examples, metric, optimizer
from gepa.core.adapter import EvaluationBatch
from gepa.strategies.proposal_sampling import PxNSampling
from record_helpers import (
    SEED,
    TRAIN,
    VAL,
    VOCAB,
    BatchLM,
    CallableLM,
    SerialAdapter,
    ThreadedAdapter,
)

from pxn.errors import PxnError
from pxn.runner.dspy_recording import recorded
from pxn.runner.record import recording
from pxn.scenario import Scenario
from pxn.trace import Rollout, RunEnd
from pxn.trace_reading import read_trace


def arguments(**kw: Any) -> dict[str, Any]:
    base = dict(
        seed_candidate=SEED,
        trainset=TRAIN,
        valset=VAL,
        adapter=SerialAdapter(),
        reflection_lm=CallableLM(),
        max_metric_calls=80,
        sampling_strategy=PxNSampling(2, 2),
        display_progress_bar=False,
    )
    return {**base, **kw}


def record(out: Path, rec_kw: dict[str, Any] | None = None, **kw: Any) -> None:
    with recording(out, **(rec_kw or {})) as rec:
        gepa.optimize(**rec.wrap(**arguments(**kw)))


class RaisesAt(SerialAdapter):
    """Raises `error` at its `call`th evaluate call (from 1)."""

    def __init__(self, call: int, error: type[BaseException] = RuntimeError):
        super().__init__()
        self.call, self.error = call, error

    def evaluate(self, batch, candidate, capture_traces=False):
        if self.calls + 1 == self.call:
            self.calls += 1
            raise self.error(f"the adapter gave up at call {self.call}")
        return super().evaluate(batch, candidate, capture_traces)


class BatchRaisesAt(ThreadedAdapter):
    """batch_evaluate on 2 threads, raising `error` at its `call`th call (the seed's
    validation goes through evaluate, not counted)."""

    def __init__(self, call: int, error: type[BaseException] = RuntimeError):
        super().__init__(2)
        self.call, self.error, self.batch_calls = call, error, 0

    def evaluate(self, batch, candidate, capture_traces=False):
        return super().batch_evaluate([(candidate, batch)])[0]

    def batch_evaluate(self, items, **kwargs):
        self.batch_calls += 1
        if self.batch_calls == self.call:
            raise self.error(f"batch_evaluate broke at call {self.call}")
        return super().batch_evaluate(items, **kwargs)


class EveryWordLM(BatchLM):
    """A reflection writing the whole vocabulary: every child passes its judge, and the
    children of an iteration are one text, so gepa keeps the first and drops the rest as
    its duplicates."""

    def __call__(self, prompt: Any) -> str:
        return "```\n" + " ".join(VOCAB) + "\n```"

    def batch_complete(self, messages_list):
        self.batches.append(len(messages_list))
        return [self(m) for m in messages_list]


class Rescored(SerialAdapter):
    """Returns `rescore(scores)` in place of each call's scores (and as many outputs)."""

    def __init__(self, rescore: Callable[[list[float]], list[Any]]):
        super().__init__()
        self.rescore = rescore

    def evaluate(self, batch, candidate, capture_traces=False):
        done = super().evaluate(batch, candidate, capture_traces)
        scores = self.rescore(done.scores)
        n = len(scores)
        return EvaluationBatch(
            outputs=done.outputs[:n], scores=scores, trajectories=(done.trajectories or [])[:n]
        )


class InterruptAt:
    """A user's callback that meets Ctrl-C at gepa's `event` of `iteration` (None: any)."""

    def __init__(self, event: str, iteration: int | None):
        setattr(self, f"on_{event}", self._maybe)
        self.iteration = iteration

    def _maybe(self, event: dict[str, Any]) -> None:
        if self.iteration is None or event.get("iteration") == self.iteration:
            raise KeyboardInterrupt


class InterruptedLM(CallableLM):
    """A reflection LM that meets Ctrl-C at its `call`th call."""

    def __init__(self, call: int):
        super().__init__()
        self.call = call

    def __call__(self, prompt):
        if self.calls + 1 == self.call:
            raise KeyboardInterrupt
        return super().__call__(prompt)


def calibrated(out: Path, tmp_path: Path, workers: int = 1) -> str:
    """`pxn calibrate OUT --workers W`: it calibrates (exit 0, a scenario written); what it
    printed. The tests' adapters time no rollout and the recordings declare no W: the user
    gives it (a serial adapter's is 1), as the one line asking for it says."""
    scenario = tmp_path / "scenario.toml"
    result = run_pxn("calibrate", out, "-o", scenario, "--draws", "0", "--workers", workers)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert Scenario.load(scenario).valset_size == len(VAL)
    return result.stdout


def refused(out: Path, tmp_path: Path, *fragments: str) -> None:
    """`pxn calibrate OUT`: one line holding every fragment, exit 2, no scenario written."""
    scenario = tmp_path / "scenario.toml"
    assert_user_error(run_pxn("calibrate", out, "-o", scenario, "--draws", "0"), *fragments)
    assert not scenario.exists()


def contents(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


# ---- the five cases issue #25 names ----------------------------------------------------


def test_workers_given_as_text_is_refused_in_domain_words(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(PxnError) as caught:
        record(out, rec_kw={"workers": "4"})
    assert caught.value.subject == "workers"
    assert str(caught.value) == "workers must be a whole number >= 1: got '4'"
    assert not out.exists()


def test_an_adapter_raising_at_its_fourth_call_is_refused_saying_how_the_run_ended(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="gave up at call 4"):
        record(out, adapter=RaisesAt(4))
    refused(
        out,
        tmp_path,
        "no reflection events",
        "failed in iteration 1: RuntimeError: the adapter gave up at call 4",
    )


def test_a_resumed_trace_cut_short_calibrates_from_what_it_holds(tmp_path):
    """Undeclared W, no run_end and an adapter that timed nothing: the trace cannot show W,
    so calibrate asks for it in one line, then calibrates from what the trace holds."""
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        record(out, callbacks=[InterruptAt("iteration_end", 2)])
    record(out, rec_kw={"resume": True})
    path = out / "trace.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    trace = read_trace(path)
    assert trace.run_end is None and trace.events[0].workers == 0
    assert trace.run_start.workers == 0  # no rollout was timed: none shows W
    refused(out, tmp_path, "--workers is unknown", "record with recording(..., workers=W)")
    printed = calibrated(out, tmp_path)
    assert "run did not complete (cut short before its run_end, in iteration" in printed


def test_an_adapter_returning_fewer_scores_than_examples_is_named(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(PxnError) as caught:
        record(out, adapter=Rescored(lambda scores: scores[:-1]))
    assert caught.value.subject == "adapter"
    assert "returned 5 scores for 6 examples" in str(caught.value)
    trace = read_trace(out / "trace.jsonl")
    assert all("returned 5 scores for 6 examples" in r.error for r in trace.of(Rollout))
    refused(out, tmp_path, "failed in the seed's validation", "returned 5 scores for 6 examples")


def test_wrap_before_the_with_block_is_refused_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    rec = recording(out)
    with pytest.raises(PxnError, match=r"^rec.wrap is called inside the `with recording"):
        rec.wrap(**arguments())
    assert not out.exists()
    with rec:  # the same recording still records its run
        gepa.optimize(**rec.wrap(**arguments()))
    assert rec.result is not None and rec.result.status == "completed"


# ---- the recorder's and gepa's arguments: refused before anything is created -----------


class Callback:
    def on_iteration_end(self, event):
        pass


MISUSED = [
    # (case, recording's arguments, gepa.optimize's, the subject, what the line says)
    ("W zero", {"workers": 0}, {}, "workers", "must be a whole number >= 1: got 0"),
    ("W a fraction", {"workers": 2.5}, {}, "workers", "got 2.5"),
    ("W a bool", {"workers": True}, {}, "workers", "got True"),
    ("C zero", {"reflection_concurrency": 0}, {}, "reflection_concurrency", "got 0"),
    ("failures as text", {"max_reflection_failures": "5"}, {}, "max_reflection_failures", "'5'"),
    ("resume as text", {"resume": "yes"}, {}, "resume", "must be True or False: got 'yes'"),
    ("resume and overwrite", {"resume": True, "overwrite": True}, {}, "recording", "exclude"),
    ("meta not JSON", {"meta": {"at": object()}}, {}, "meta", "JSON values only"),
    ("meta a list", {"meta": ["note"]}, {}, "meta", "must be a dict with str keys"),
    ("no adapter", {}, {"adapter": None}, "adapter", "is needed"),
    ("no trainset", {}, {"trainset": None}, "trainset", "is needed"),
    ("an empty trainset", {}, {"trainset": []}, "trainset", "is empty"),
    ("a trainset of one pass", {}, {"trainset": "iterator"}, "trainset", "must be a list"),
    ("an empty valset", {}, {"valset": []}, "valset", "is empty"),
    ("no component", {}, {"seed_candidate": {}}, "seed_candidate", "at least one"),
    ("no reflection LM", {}, {"reflection_lm": None}, "reflection_lm", "is needed"),
    ("no stopping condition", {}, {"max_metric_calls": None}, "max_metric_calls", "stopping"),
    ("B as text", {}, {"max_metric_calls": "80"}, "max_metric_calls", "got '80'"),
    ("B below V", {}, {"max_metric_calls": 3}, "max_metric_calls", "leaves nothing after"),
    ("B of V: no iteration", {}, {"max_metric_calls": 6}, "max_metric_calls", "more than 6"),
    ("b zero", {}, {"reflection_minibatch_size": 0}, "reflection_minibatch_size", "got 0"),
    ("one callback, no list", {}, {"callbacks": Callback()}, "callbacks", "must be a list"),
]


@pytest.mark.parametrize(
    ("rec_kw", "kw", "subject", "fragment"),
    [case[1:] for case in MISUSED],
    ids=[case[0] for case in MISUSED],
)
def test_a_misused_argument_is_one_line_before_anything_is_created(
    tmp_path, rec_kw, kw, subject, fragment
):
    out = tmp_path / "run"
    if kw.get("trainset") == "iterator":
        kw = {**kw, "trainset": iter(TRAIN)}
    with pytest.raises(PxnError) as caught:
        record(out, rec_kw, **kw)
    assert caught.value.subject == subject, caught.value
    assert fragment in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists()


def test_a_run_directory_that_is_no_directory_is_refused(tmp_path):
    with pytest.raises(PxnError, match=r"run directory must be a path .*: got int"):
        recording(5)
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    with pytest.raises(PxnError, match=r"notes.txt is a file: give a directory"):
        record(taken)
    assert taken.read_text() == "mine"


def test_a_run_dir_holding_another_runs_state_is_refused(tmp_path):
    """gepa would silently continue the earlier run from its saved state, in a new trace."""
    earlier = tmp_path / "earlier"
    with pytest.raises(KeyboardInterrupt):
        record(earlier, callbacks=[InterruptAt("iteration_end", 2)])
    before = contents(earlier)
    with pytest.raises(PxnError) as caught:
        record(tmp_path / "run", run_dir=str(earlier / "gepa"))
    assert caught.value.subject == "run_dir" and "saved state of an earlier run" in str(
        caught.value
    )
    assert contents(earlier) == before
    assert not (tmp_path / "run").exists()


def test_a_recording_nested_in_one_into_the_same_directory_is_refused(tmp_path):
    out = tmp_path / "run"
    with recording(out) as outer:
        with pytest.raises(PxnError, match="is being recorded into already"), recording(out):
            pass
        gepa.optimize(**outer.wrap(**arguments()))
    assert outer.result.status == "completed" and outer.result.mismatches == ()
    # Nested into another directory, both record the one run.
    with recording(tmp_path / "outer") as a, recording(tmp_path / "inner") as b:
        gepa.optimize(**b.wrap(**a.wrap(**arguments())))
    assert a.result.metric_calls == b.result.metric_calls > 0
    assert a.result.mismatches == b.result.mismatches == ()


def test_wrap_twice_and_a_second_run_are_refused(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(PxnError, match=r"rec.wrap was called already"), recording(out) as rec:
        rec.wrap(**arguments())
        rec.wrap(**arguments())
    # The first wrap started the run: its trace ends failed, with nothing to calibrate.
    assert read_trace(out / "trace.jsonl").run_end.status == "failed"
    refused(out, tmp_path, "holds no rollout events")
    with pytest.raises(PxnError, match=r"^a recording records one run"), rec:
        pass


def test_a_report_before_wrap_and_a_block_without_wrap_say_so(tmp_path):
    out = tmp_path / "run"
    rec = recording(out)
    with pytest.raises(PxnError, match=r"^the recording has not started: call rec.wrap"):
        rec.report_rollout(0, None)
    with pytest.warns(RuntimeWarning, match="nothing was recorded into"), rec:
        gepa.optimize(**arguments())  # the user forgot rec.wrap
    assert not out.exists()


def test_resuming_with_another_setup_is_refused_and_the_trace_left_alone(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        record(out, callbacks=[InterruptAt("iteration_end", 2)])
    before = contents(out)
    with pytest.raises(PxnError, match=r"another setup \(shape 2x2 -> 1x3\)"):
        record(out, {"resume": True}, sampling_strategy=PxNSampling(1, 3))
    assert contents(out) == before


# ---- faults: what a run leaves, pxn calibrate reads or refuses in one line ---------------


class HangsUp(SerialAdapter):
    """Answers the seed's validation, then drops every connection."""

    def evaluate(self, batch, candidate, capture_traces=False):
        if self.calls:
            raise ConnectionResetError("the adapter's server hung up")
        return super().evaluate(batch, candidate, capture_traces)


def cut_mid_line(out: Path) -> None:
    path = out / "trace.jsonl"
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) - 40], encoding="utf-8")


def newer_schema(out: Path) -> None:
    path = out / "trace.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    path.write_text("\n".join([json.dumps({**header, "schema": 99}), *lines[1:]]) + "\n")


def twice_in_one_file(out: Path) -> None:
    path = out / "trace.jsonl"
    path.write_text(path.read_text(encoding="utf-8") * 2, encoding="utf-8")


class BreaksFrom(dspy.Module):
    """dspy_program.py's topic labeller, raising from its `first`th call on: DSPy scores each
    such rollout as failed and builds no reflective dataset from it, and the run goes on."""

    def __init__(self, first: int):
        super().__init__()
        self.predict = dspy.Predict(Topic)
        calls = itertools.count(1)
        # A function, which DSPy's copy of the program per candidate shares: one count.
        self.next_call = lambda: next(calls)
        self.first = first

    def forward(self, sentence: str) -> dspy.Prediction:
        call = self.next_call()
        if call >= self.first:
            raise RuntimeError(f"the program broke at call {call}")
        return self.predict(sentence=sentence)


def unscored_from(first: int) -> Callable[..., dspy.Prediction]:
    """dspy_program.py's metric, answering with feedback and no score from its `first`th call
    on: DSPy's adapter raises converting it, mid-stage."""
    calls = itertools.count(1)

    def scored(gold, pred, trace=None, pred_name=None, pred_trace=None):
        if next(calls) >= first:
            return dspy.Prediction(feedback="the grader forgot the score")
        return metric(gold, pred, trace, pred_name, pred_trace)

    return scored


def compiled_by_dspy(
    program: Callable[[], Any] = lambda: dspy.Predict(Topic),
    metric_: Callable[[], Any] = lambda: metric,
) -> Callable[[Path], None]:
    """A recorded dspy.GEPA compile on DSPy's DummyLMs (the task LM never right, every
    reflection a new instruction), as FAULTS runs it into its directory: the program and
    metric made by the factories given."""

    def compile_into(out: Path) -> None:
        task = DummyLM({"": {"topic": "none"}})
        replies = [{"new_instruction": f"Name the topic (try {i})."} for i in range(60)]
        proposals = DummyLM(replies, adapter=dspy.JSONAdapter())
        for lm in (task, proposals):
            lm.cache = False  # DummyLM answers every call itself; it only says it caches
        made = optimizer(proposals, metric=metric_(), max_metric_calls=60)
        with dspy.context(lm=task):
            recorded(made, out).compile(
                program(), trainset=examples("train", 6), valset=examples("val", len(VAL))
            )

    return compile_into


FAULTS = [
    # (case, gepa.optimize's arguments or a dspy.GEPA compile into the run directory, what
    #  the run raises, what is done to its trace after, whether pxn calibrate calibrates,
    #  what it says)
    (
        "batch_evaluate raises in full validation",
        {"adapter": BatchRaisesAt(3), "reflection_lm": BatchLM()},
        RuntimeError,
        None,
        True,
        "run did not complete (failed in iteration 1: RuntimeError: batch_evaluate broke",
    ),
    (
        # Found by experiments/interrupts (two children in full validation, neither in the
        # pool yet). Here the 4 children are one text and pass; 3 are dropped as the
        # first's duplicates and the first never joins the pool: they read as 4 dropped of
        # 3 children after the first, and scipy's binomtest raised a ValueError.
        "Ctrl-C in full validation, the iteration's duplicates dropped",
        {"adapter": BatchRaisesAt(3, KeyboardInterrupt), "reflection_lm": EveryWordLM()},
        KeyboardInterrupt,
        None,
        True,
        "run did not complete (interrupted in iteration 1",
    ),
    (
        "the adapter hangs up, raise_on_exception=False",
        {"adapter": HangsUp(), "raise_on_exception": False},
        None,
        None,
        False,
        "stopped: 8 adapter calls in a row raised (last error: ConnectionResetError",
    ),
    (
        "NaN scores",
        {"adapter": Rescored(lambda scores: [float("nan")] * len(scores))},
        PxnError,
        None,
        False,
        "returned the score nan",
    ),
    (
        "no scores",
        {"adapter": Rescored(lambda scores: [None] * len(scores))},
        PxnError,
        None,
        False,
        "returned the score None",
    ),
    (
        "the reflection LM always fails",
        {"reflection_lm": CallableLM(fail=True), "max_metric_calls": 400},
        None,
        None,
        False,
        "reflection(s) failed (last: ConnectionError: the reflection model is down)); give the "
        "reflection LM room to write a usable reply",
    ),
    (
        "its own stopper stops it before iteration 1",
        {"max_metric_calls": None, "stop_callbacks": [lambda state: True]},
        None,
        None,
        False,
        "completed after 0 iteration(s)",
    ),
    (
        "its own stopper, no budget",
        {"max_metric_calls": None, "stop_callbacks": [lambda state: state.i >= 2]},
        None,
        None,
        True,
        "declares no budget (a run stopped by its own stop_callbacks)",
    ),
    (
        "Ctrl-C in the seed's validation",
        {"adapter": RaisesAt(1, KeyboardInterrupt)},
        KeyboardInterrupt,
        None,
        False,
        "interrupted in the seed's validation: interrupted by the user (Ctrl-C)",
    ),
    (
        "Ctrl-C in a parent minibatch",
        {"adapter": RaisesAt(2, KeyboardInterrupt)},
        KeyboardInterrupt,
        None,
        False,
        "interrupted in iteration 1",
    ),
    (
        "Ctrl-C in the first reflection",
        {"reflection_lm": InterruptedLM(1)},
        KeyboardInterrupt,
        None,
        False,
        "no judged proposals",
    ),
    (
        "Ctrl-C at the end of iteration 1",
        {"callbacks": [InterruptAt("iteration_end", 1)]},
        KeyboardInterrupt,
        None,
        True,
        "run did not complete (interrupted in iteration 1",
    ),
    (
        "Ctrl-C after gepa's loop",
        {"callbacks": [InterruptAt("optimization_end", None)]},
        KeyboardInterrupt,
        None,
        True,
        "run did not complete (interrupted in iteration 3",
    ),
    (
        # Every rollout from the 9th fails and no reflection has a dataset: the quality
        # model's predictive runs lose every proposal, so they have no acceptance figure.
        "dspy.GEPA: the program raises in every rollout from the 9th",
        compiled_by_dspy(program=lambda: BreaksFrom(9)),
        None,
        None,
        True,
        "rollouts failed (first: RuntimeError: the program broke at call",
    ),
    (
        "dspy.GEPA: DSPy's adapter raises mid-run",
        compiled_by_dspy(metric_=lambda: unscored_from(30)),
        ValueError,
        None,
        True,
        "run did not complete (failed in iteration 4: ValueError: Prediction object does not "
        "have a 'score' field",
    ),
    ("a trace cut mid-line", {}, None, cut_mid_line, True, "truncated last line"),
    ("a newer schema", {}, None, newer_schema, False, "trace schema version 99"),
    ("two runs in one file", {}, None, twice_in_one_file, False, "a second run_start"),
]


@pytest.mark.parametrize(
    ("kw", "raised", "damage", "calibrates", "said"),
    [case[1:] for case in FAULTS],
    ids=[case[0] for case in FAULTS],
)
def test_what_a_run_leaves_calibrates_or_is_refused_in_one_line(
    tmp_path, kw, raised, damage, calibrates, said
):
    out = tmp_path / "run"
    expected = pytest.raises(raised) if raised else contextlib.nullcontext()
    with expected:
        kw(out) if callable(kw) else record(out, **kw)
    assert isinstance(read_trace(out / "trace.jsonl").events[-1], RunEnd)
    if damage is not None:
        damage(out)
    if calibrates:
        assert said in calibrated(out, tmp_path)
    else:
        refused(out, tmp_path, said)
