"""Recording users' own gepa.optimize runs: the real gepa 0.1.4 with plain Python adapters and
reflection LMs (record_helpers.py), the trace checked against gepa's own counts."""

from __future__ import annotations

import ast
from collections import Counter
from itertools import groupby, pairwise
from pathlib import Path

import gepa
import pytest
from conftest import run_pxn
from gepa.strategies.proposal_sampling import PxNSampling
from record_helpers import (
    SEED,
    TRAIN,
    VAL,
    BatchLM,
    CallableLM,
    Counting,
    FailOnce,
    ProposingAdapter,
    SerialAdapter,
    StoppedAdapter,
    ThreadedAdapter,
    check_prefixes,
    next_words,
    score,
)

from pxn.calibrate.traces.units import cut_into_units
from pxn.errors import PxnError
from pxn.run_summary import summarize
from pxn.runner.prompt_prefix import prompt_text, shared_prefix_chars
from pxn.runner.record import ReflectionReport, RunFinished, recording
from pxn.runner.recording.totals import max_concurrency, trace_totals
from pxn.trace import Decision, Iteration, NoProposal, Reflection, Resume, Rollout, RunEnd
from pxn.trace_reading import read_trace

ROOT = Path(__file__).resolve().parents[1]


def arguments(adapter, lm, **kw):
    base = dict(
        seed_candidate=SEED,
        trainset=TRAIN,
        valset=VAL,
        adapter=adapter,
        reflection_lm=lm,
        max_metric_calls=80,
        sampling_strategy=PxNSampling(2, 2),
        display_progress_bar=False,
    )
    return {**base, **kw}


def record(out, adapter, lm, *, rec_kw=None, **kw):
    with recording(out, **(rec_kw or {})) as rec:
        result = gepa.optimize(**rec.wrap(**arguments(adapter, lm, **kw)))
    return rec, result


def test_a_serial_adapter_and_a_callable_lm_are_recorded_as_gepa_ran_them(tmp_path):
    adapter, lm, mine = SerialAdapter(), CallableLM(), Counting()
    with recording(tmp_path / "run") as rec:
        kwargs = rec.wrap(**arguments(adapter, lm, callbacks=[mine]))
        # gepa picks its path by what the objects have: the wrappers have the same.
        assert not hasattr(kwargs["adapter"], "batch_evaluate")
        assert not hasattr(kwargs["reflection_lm"], "batch_complete")
        result = gepa.optimize(**kwargs)
    run = rec.result
    assert run.status == "completed" and run.mismatches == ()
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    assert trace.skipped == [] and isinstance(trace.events[-1], RunEnd)
    # Every metric call gepa counted is one rollout, and each reflection call one event.
    assert len(trace.of(Rollout)) == result.total_metric_calls == run.metric_calls
    assert len(trace.of(Reflection)) == lm.calls == run.reflection_calls
    assert run.accepted == result.num_candidates - 1 >= 1
    assert run.iterations == mine.iterations  # the user's callback saw every iteration
    assert mine.budget_updates > 0
    start = trace.run_start
    assert (start.shape, start.budget, start.valset_size, start.minibatch) == ("2x2", 80, 6, 3)
    assert start.meta["selection"] == "all" and start.reflection_concurrency == 1
    assert (start.meta["use_merge"], start.meta["components"]) == (False, 1)
    examples = {r.example for r in trace.of(Rollout)}
    assert {f"val/{i}" for i in range(len(VAL))} <= examples
    assert all(e.startswith(("train/", "val/")) and "?" not in e for e in examples)
    phases = {r.phase for r in trace.of(Rollout)}
    assert phases == {"seed_val", "parent_minibatch", "child_minibatch", "full_val"}
    # gepa called evaluate pair after pair: each call's examples span it, one call at a time,
    # and the trace says nothing timed them.
    assert adapter.calls == len({(r.start, r.end) for r in trace.of(Rollout)})
    assert not any(r.timed for r in trace.of(Rollout)) and run.untimed_calls == adapter.calls


def test_concurrency_is_measured_as_it_was_not_made(tmp_path):
    """W = 3 rollouts meet at a barrier, so they are in flight together for real; the
    adapter reports each rollout's own times and the trace's W is what it saw."""
    out = tmp_path / "run"
    lm = BatchLM()
    with recording(out) as rec:
        adapter = ThreadedAdapter(3, meet=True, recording=rec)
        kwargs = rec.wrap(**arguments(adapter, lm))
        assert hasattr(kwargs["reflection_lm"], "batch_complete")
        gepa.optimize(**kwargs)
    trace = read_trace(out / "trace.jsonl")
    rollouts = trace.of(Rollout)
    assert rec.result.workers_seen == max_concurrency(rollouts) == 3
    assert trace.run_start.workers == 3  # not declared: run_end's measurement stands in
    assert sorted({r.worker for r in rollouts}) == [0, 1, 2]
    # All P*N = 4 reflections of a step went to the LM in one batch, as without recording.
    assert lm.batches and all(size == 4 for size in lm.batches)
    assert rec.result.mismatches == ()


@pytest.mark.parametrize("declared", [2, None])
def test_an_adapter_that_times_no_rollout_marks_its_calls_untimed(tmp_path, declared):
    """A plain adapter running each call's examples on a pool of 2 threads, recorded with the
    one line: every rollout spans its call and says it is untimed, so calls of more than 2
    examples overlap in the trace without being a mismatch, and W is what was declared (else
    unknown: 0), not the largest call."""
    adapter = ThreadedAdapter(2)
    rec, result = record(tmp_path / "run", adapter, BatchLM(), rec_kw={"workers": declared})
    assert rec.result.status == "completed" and rec.result.mismatches == ()
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    rollouts = trace.of(Rollout)
    assert len(rollouts) == result.total_metric_calls and not any(r.timed for r in rollouts)
    calls = {(r.iteration, r.phase, r.start, r.end) for r in rollouts}
    assert len(calls) == adapter.calls == rec.result.untimed_calls
    assert max(Counter((r.start, r.end) for r in rollouts).values()) > 2  # overlapping, as spans
    assert rec.result.workers_seen == trace.run_end.workers == 0
    assert trace.run_start.workers == (declared or 0)


def test_a_declared_w_is_checked_against_what_ran(tmp_path):
    with recording(tmp_path / "run", workers=2) as rec:
        gepa.optimize(
            **rec.wrap(**arguments(ThreadedAdapter(3, meet=True, recording=rec), BatchLM()))
        )
    assert rec.result.mismatches == ("3 rollouts ran at once with only 2 workers",)


def test_an_adapter_that_raises_leaves_a_valid_trace_with_its_error(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="the adapter broke on w7"):
        record(out, SerialAdapter(fail_on="w7"), CallableLM())
    trace = read_trace(out / "trace.jsonl")
    assert trace.skipped == []
    end = trace.events[-1]
    assert isinstance(end, RunEnd) and end.status == "failed" and "w7" in end.message
    failed = [r for r in trace.of(Rollout) if r.error]
    assert failed and all("the adapter broke on w7" in r.error for r in failed)
    assert end.metric_calls == len(trace.of(Rollout))  # the calls that were really made


def test_a_failing_reflection_lm_is_recorded_and_stops_the_run(tmp_path):
    out = tmp_path / "run"
    lm = CallableLM(fail=True)
    rec, _ = record(out, SerialAdapter(), lm, max_metric_calls=400)
    assert rec.result.status == "failed"
    assert "reflections in a row produced no proposal" in rec.result.message
    assert "the reflection model is down" in rec.result.message
    trace = read_trace(out / "trace.jsonl")
    reflections = trace.of(Reflection)
    assert len(reflections) == lm.calls > 0
    assert all("the reflection model is down" in r.error for r in reflections)
    # Every task that reached its reflection was lost there, and says why.
    lost = trace.of(NoProposal)
    reached = {(r.iteration, r.proposal) for r in reflections}
    assert {(e.iteration, e.proposal) for e in lost if e.reason == "reflection_failed"} == reached
    assert all("the reflection model is down" in e.error for e in lost if e.error)
    summary = summarize(trace)
    assert summary.proposals == 0 and summary.failed == len(reached)
    assert summary.no_proposal_iterations == summary.iterations > 0


def test_an_interrupt_mid_stage_writes_no_rollout_that_never_started(tmp_path):
    """Ctrl-C in the seed's validation with W = 2: one rollout done, two in flight, three
    never started. The two are written up to the interrupt; the three are not, so W reads 2."""
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), recording(out) as rec:
        adapter = StoppedAdapter(2, recording=rec)
        gepa.optimize(**rec.wrap(**arguments(adapter, CallableLM())))
    adapter.release.set()  # the two in flight finish after the trace closed: dropped
    trace = read_trace(out / "trace.jsonl")
    end = trace.run_end
    assert end.status == "interrupted"
    rollouts = trace.of(Rollout)
    assert sorted(r.example for r in rollouts) == sorted(f"val/{i}" for i in adapter.started)
    assert len(rollouts) == 3 < len(VAL)
    done = [r for r in rollouts if r.error is None]
    assert [r.example for r in done] == ["val/0"] and done[0].score is not None
    cut = [r for r in rollouts if r.error]
    assert len(cut) == 2 and all("KeyboardInterrupt" in r.error for r in cut)
    assert all(r.end <= end.start for r in rollouts)
    assert end.workers == max_concurrency(rollouts) == 2
    assert end.metric_calls == rec.result.metric_calls == 3


def passes(events: list[Reflection]) -> list[str]:
    """The proposal ids of one step's reflections, one call per job, as gepa makes them: one
    pass in job order and, if a call of that pass raised, the pass up to it and then every
    job again."""
    jobs = list(dict.fromkeys(e.proposal for e in events))
    first_failure = next((i for i, e in enumerate(events) if e.error), None)
    if first_failure is None:
        return jobs
    return jobs[: first_failure + 1] + jobs


@pytest.mark.parametrize("proposer", ["adapter", "callable LM"])
def test_a_reflection_that_fails_once_keeps_the_proposal_ids(tmp_path, proposer):
    """gepa throws a step's first pass away when one of its reflections raises, and asks
    again for every job: the retried jobs' events carry the same ids, and calibration counts
    each task that reached a reflection once."""
    fail = FailOnce(call=2)
    if proposer == "adapter":
        adapter, lm = ProposingAdapter(fail), CallableLM()
    else:
        adapter, lm = SerialAdapter(), CallableLM(fail)
    mine = Counting()
    rec, _ = record(tmp_path / "run", adapter, lm, callbacks=[mine])
    assert rec.result.status == "completed" and rec.result.mismatches == ()
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    reflections = trace.of(Reflection)
    assert len(reflections) == fail.calls  # every proposal or LM call, the failed one too
    if proposer == "adapter":
        assert adapter.proposals == fail.calls and lm.calls == 0
    # The reflection that failed is in the trace with its error; nothing is unlabelled.
    assert next(r for r in reflections if r.error).iteration == 1
    assert all("?" not in r.proposal and "?" not in r.parent for r in reflections)
    by_step = groupby(reflections, key=lambda r: r.iteration)
    steps = {iteration: list(events) for iteration, events in by_step}
    assert len(steps[1]) > len(set(r.proposal for r in steps[1]))  # the step was retried
    for events in steps.values():
        assert [e.proposal for e in events] == passes(events)
    # Every proposal gepa judged comes from its task's last reflection, which succeeded.
    for decision in trace.of(Decision):
        last = [r for r in steps[decision.iteration] if r.proposal == decision.proposal][-1]
        assert last.error is None and last.parent == decision.parent
    # Calibration: each task reached a reflection once, or gepa skipped it.
    units = cut_into_units([trace])
    completed = len(trace.of(Iteration))
    assert units.tasks.sum() == 4 * completed
    assert units.reflected.sum() == len({(r.iteration, r.proposal) for r in reflections})
    assert units.reflected.sum() == units.tasks.sum() - mine.skipped < len(reflections)
    # The failed call was asked again and gave texts: nothing was lost; skips say so.
    lost = trace.of(NoProposal)
    assert [e.reason for e in lost] == ["perfect_parent"] * mine.skipped
    assert summarize(trace).failed == 0 and summarize(trace).skipped == mine.skipped


class NoDatasetFor(SerialAdapter):
    """Cannot build the reflective dataset of its `call`th task (as DSPy's adapter raises when
    no prediction of a minibatch parsed): gepa logs it and skips the task, with no callback."""

    def __init__(self, call: int):
        super().__init__()
        self.call = call
        self.datasets = 0

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        self.datasets += 1
        if self.datasets == self.call:
            raise ValueError("no valid predictions in this minibatch")
        return super().make_reflective_dataset(candidate, eval_batch, components_to_update)


class Minibatches(Counting):
    """The minibatch gepa sampled for each task, per iteration, in task order."""

    def __init__(self) -> None:
        super().__init__()
        self.sampled: dict[int, list[list[int]]] = {}

    def on_minibatch_sampled(self, event):
        self.sampled.setdefault(event["iteration"], []).append(list(event["minibatch_ids"]))


def test_a_task_whose_reflective_dataset_failed_leaves_the_others_their_ids(tmp_path):
    """The first step's second task has no dataset, so the step reflects on tasks 0, 2 and 3:
    each event carries its own task's id (the decision's parent score is the seed's on that
    task's minibatch, as gepa sampled it), and task 1 has none."""
    adapter, mine = NoDatasetFor(call=2), Minibatches()
    rec, _ = record(tmp_path / "run", adapter, CallableLM(), callbacks=[mine])
    assert rec.result.status == "completed" and rec.result.mismatches == ()
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    assert [r.proposal for r in trace.of(Reflection) if r.iteration == 1] == ["1-0", "1-2", "1-3"]
    first = [d for d in trace.of(Decision) if d.iteration == 1]
    assert [d.proposal for d in first] == ["1-0", "1-2", "1-3"]
    for decision in first:
        ids = mine.sampled[1][int(decision.proposal.partition("-")[2])]
        assert decision.score_before == sum(score(SEED, TRAIN[i]) for i in ids), decision
    # The seed scores on one minibatch only, so a label one task off would show.
    assert len({d.score_before for d in first}) == 2
    # Task 1 was lost before its reflection, and the trace says why.
    lost = [e for e in trace.of(NoProposal) if e.reason != "perfect_parent"]
    assert [(e.iteration, e.proposal, e.parent, e.reason) for e in lost] == [
        (1, "1-1", "0", "reflective_dataset")
    ]
    assert "no valid predictions in this minibatch" in lost[0].error
    assert summarize(trace).failed == 1


class BreaksOnChildren(SerialAdapter):
    """Raises on the first child minibatch it is asked to evaluate (gepa's raise_on_exception
    off: it logs the error, ends the iteration and goes on)."""

    def __init__(self) -> None:
        super().__init__()
        self.broke = False

    def evaluate(self, batch, candidate, capture_traces=False):
        if capture_traces and candidate != SEED and not self.broke:
            self.broke = True
            raise RuntimeError("the child's program crashed")
        return super().evaluate(batch, candidate, capture_traces)


def test_an_iteration_gepa_gave_up_on_loses_its_proposals_with_the_error(tmp_path):
    adapter = BreaksOnChildren()
    rec, _ = record(
        tmp_path / "run", adapter, CallableLM(), raise_on_exception=False, max_metric_calls=60
    )
    assert adapter.broke and rec.result.status == "completed"
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    lost = [e for e in trace.of(NoProposal) if e.reason == "iteration_failed"]
    assert lost and all("the child's program crashed" in e.error for e in lost)
    iteration = lost[0].iteration
    assert not [d for d in trace.of(Decision) if d.iteration == iteration]
    assert {e.iteration for e in lost} == {iteration}


def test_an_adapter_that_proposes_is_recorded_through_the_public_interface(tmp_path):
    """gepa asks the adapter, not the LM, for each proposal, one at a time: each is one
    reflection and C is 1."""
    adapter, lm = ProposingAdapter(), BatchLM()
    rec, _ = record(tmp_path / "run", adapter, lm)
    assert rec.result.mismatches == () and not lm.batches
    trace = read_trace(tmp_path / "run" / "trace.jsonl")
    reflections = trace.of(Reflection)
    assert len(reflections) == adapter.proposals == rec.result.reflection_calls > 0
    assert trace.run_start.reflection_concurrency == 1
    assert all(a.end <= b.start for a, b in pairwise(reflections))
    assert all(r.fenced is None and r.error is None for r in reflections)


class ReportingLM(BatchLM):
    """Reports each reply with its prompt, a batch's last job first (as a pool whose last
    prompt finished first would): tokens_in is the prompt's length in characters, tokens_out
    its position in `prompts`, every prompt in gepa's job order."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = None
        self.prompts: list[str] = []

    def __call__(self, prompt):
        return self._reported([prompt])[0]

    def batch_complete(self, messages_list):
        self.batches.append(len(messages_list))
        return self._reported(messages_list)

    def _reported(self, prompts):
        first = len(self.prompts)
        texts = [prompt_text(p) for p in prompts]
        self.prompts.extend(texts)
        replies = [next_words(text) for text in texts]
        for i in reversed(range(len(texts))):
            now = self.recording.clock()
            report = ReflectionReport(
                start=now,
                end=now,
                text=replies[i],
                prompt=texts[i],
                tokens_in=len(texts[i]),
                tokens_out=first + i,
            )
            self.recording.report_reflection(i, report)
        return replies


def test_a_reflections_prefix_is_counted_against_its_parents_previous_prompt_in_job_order(
    tmp_path,
):
    """Each reflection's prefix_tokens is the prefix its prompt shares with the previous prompt
    of its parent in job order, though a batch reports its last job first; a parent's first
    has none; no prompt reaches the trace."""
    lm = ReportingLM()
    with recording(tmp_path / "run") as rec:
        lm.recording = rec
        gepa.optimize(**rec.wrap(**arguments(SerialAdapter(), lm)))
    assert rec.result.mismatches == () and max(lm.batches) == 4
    reflections = sorted(
        read_trace(tmp_path / "run" / "trace.jsonl").of(Reflection), key=lambda r: r.tokens_out
    )
    assert [r.tokens_out for r in reflections] == list(range(len(lm.prompts)))
    for k, (event, prompt) in enumerate(zip(reflections, lm.prompts, strict=True)):
        # The last prompt before it, in job order, of its parent by another job.
        earlier = [
            lm.prompts[j]
            for j in range(k)
            if reflections[j].parent == event.parent and reflections[j].proposal != event.proposal
        ]
        expected = shared_prefix_chars(prompt, earlier[-1]) if earlier else None
        assert event.prefix_tokens == expected, event
    assert check_prefixes(reflections) >= len(reflections) - len({r.parent for r in reflections})
    text = (tmp_path / "run" / "trace.jsonl").read_text()
    assert not any(prompt in text for prompt in lm.prompts)


def reaches_into_the_recording(node: ast.AST) -> bool:
    """Whether an import names a part of pxn.runner.recording other than its totals."""
    package = "pxn.runner.recording"
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module == "pxn.runner":
        modules = [f"pxn.runner.{alias.name}" for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module == package:
        modules = [f"{package}.{alias.name}" for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
    else:
        return False
    return any(
        (m == package or m.startswith(package + ".")) and m != f"{package}.totals" for m in modules
    )


def test_only_the_entry_points_reach_into_the_recording():
    """The recorder's parts are the recording's own: every other module uses pxn.runner.record
    or pxn.runner.dspy_recording (which re-export them), or the totals traces are checked with."""
    entry_points = {"runner/record.py", "runner/dspy_recording.py"}
    reaching = []
    folders = ("pxn", "sim", "runner", "calibrate", "app", "tests", "experiments")
    for path in sorted(p for folder in folders for p in (ROOT / folder).glob("**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("runner/recording/") or relative in entry_points:
            continue
        tree = ast.parse(path.read_text(), relative)
        if any(reaches_into_the_recording(node) for node in ast.walk(tree)):
            reaching.append(relative)
    assert reaching == []


class InterruptAt:
    """Ctrl-C where a real one can land: gepa lets a KeyboardInterrupt out of a callback."""

    def __init__(self, iteration: int):
        self.iteration = iteration

    def on_iteration_end(self, event):
        if event["iteration"] == self.iteration:
            raise KeyboardInterrupt


def test_an_interrupt_ends_the_trace_with_the_true_counts_and_resume_completes_it(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        record(out, SerialAdapter(), CallableLM(), callbacks=[InterruptAt(2)])
    trace = read_trace(out / "trace.jsonl")
    end = trace.events[-1]
    assert isinstance(end, RunEnd) and end.status == "interrupted"
    assert end.metric_calls == len(trace.of(Rollout)) > len(VAL)
    assert end.iterations == 2

    rec, result = record(out, SerialAdapter(), CallableLM(), rec_kw={"resume": True})
    trace = read_trace(out / "trace.jsonl")
    assert len(trace.of(Resume)) == 1 and trace.events[-1].status == "completed"
    run = rec.result
    # Every total covers the whole run, and agrees with gepa's state.
    assert run.mismatches == ()
    assert run.metric_calls == result.total_metric_calls == trace_totals(trace).metric_calls
    assert run.accepted == result.num_candidates - 1
    assert run.proposals == len(trace.live(Decision))
    assert run.iterations == trace_totals(trace).iterations > 2


class LabelInterrupts(CallableLM):
    """A reflection LM whose label, read as run_start is made, meets Ctrl-C: the moment
    after the trace file is opened and before its first event."""

    @property
    def label(self) -> str:
        raise KeyboardInterrupt


def test_an_interrupt_before_the_first_event_leaves_no_trace_and_stays_an_interrupt(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        record(out, SerialAdapter(), LabelInterrupts())
    assert not (out / "trace.jsonl").exists()  # not an empty file that no reader accepts
    rec, result = record(out, SerialAdapter(), CallableLM())  # the directory is free again
    assert rec.result.metric_calls == result.total_metric_calls


def test_a_used_directory_is_refused_unless_resumed_or_overwritten(tmp_path):
    out = tmp_path / "run"
    record(out, SerialAdapter(), CallableLM())
    before = (out / "trace.jsonl").read_bytes()
    used = pytest.raises(PxnError, match="already holds a trace: resume it, overwrite it")
    with used, recording(out):
        pass
    with (
        pytest.raises(RunFinished, match=r"finished already .*nothing to resume"),
        recording(out, resume=True),
    ):
        pass
    assert (out / "trace.jsonl").read_bytes() == before
    rec, result = record(out, SerialAdapter(), CallableLM(), rec_kw={"overwrite": True})
    assert rec.result.metric_calls == result.total_metric_calls  # a fresh run, not a resume
    assert len(read_trace(out / "trace.jsonl").of(RunEnd)) == 1


def test_another_gepa_version_is_named_before_anything_runs(tmp_path, monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda d: "0.2.0" if d == "gepa" else real(d)
    )
    refused = pytest.raises(PxnError, match=r"^gepa version is 0.2.0; pxn records gepa 0.1.4")
    with refused, recording(tmp_path / "run"):
        pass
    assert not (tmp_path / "run").exists()


class LeakyAdapter(SerialAdapter):
    """Raises an error that quotes a key, as a careless client library might."""

    def evaluate(self, batch, candidate, capture_traces=False):
        raise PermissionError(f"rejected key {SECRET} for this model")


SECRET = "sk-test-NEVER-IN-A-TRACE-0123456789"


def test_keys_never_reach_the_trace(tmp_path):
    with pytest.raises(PermissionError):
        record(tmp_path / "b", LeakyAdapter(), CallableLM())
    trace = read_trace(tmp_path / "b" / "trace.jsonl")
    assert "rejected key" in trace.events[-1].message
    assert all(r.error and "rejected key" in r.error for r in trace.of(Rollout))
    assert SECRET not in (tmp_path / "b" / "trace.jsonl").read_text()


@pytest.mark.slow
def test_a_recorded_trace_calibrates_unchanged(tmp_path):
    out = tmp_path / "run"
    with recording(out, workers=3) as rec:
        adapter = ThreadedAdapter(3, recording=rec)
        gepa.optimize(**rec.wrap(**arguments(adapter, BatchLM(), max_metric_calls=200)))
    ran = run_pxn("calibrate", out, "-o", tmp_path / "cal.toml", "--jobs", "1")
    assert ran.returncode == 0, ran.stderr
    from pxn.scenario import Scenario

    scenario = Scenario.load(tmp_path / "cal.toml")
    assert scenario.workers == 3 and scenario.valset_size == len(VAL)


@pytest.mark.lm
def test_a_model_string_reflection_lm_is_metered_call_by_call(tmp_path, lm_pool):
    """A model string runs as gepa's own litellm LM (here against the local pool): every
    reflection call is one event with the tokens the server reported, and their sum is the
    LM's own total; each after its parent's first counts the prompt prefix they share."""
    from pxn.runner.lm_pool import LOCAL_KEY

    out = tmp_path / "run"
    server = lm_pool.servers[0]
    lm_kwargs = {"api_base": server.api_base, "api_key": LOCAL_KEY, "max_tokens": 16}
    with recording(out) as rec:
        kwargs = rec.wrap(
            **arguments(
                SerialAdapter(), lm_pool.model, reflection_lm_kwargs=lm_kwargs, max_metric_calls=40
            )
        )
        metered = kwargs["reflection_lm"]
        gepa.optimize(**kwargs)
    reflections = read_trace(out / "trace.jsonl").of(Reflection)
    assert reflections and all(r.error is None and r.tokens_in for r in reflections)
    assert sum(r.tokens_in for r in reflections) == metered.total_tokens_in
    assert sum(r.tokens_out for r in reflections) == metered.total_tokens_out
    assert rec.result.mismatches == ()
    assert check_prefixes(reflections) > 0
