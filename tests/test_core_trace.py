"""The trace schema: writer, reader (and what it skips), and the run summary."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pxn.errors import PxnError
from pxn.run_summary import summarize
from pxn.trace import (
    SCHEMA_VERSION,
    Decision,
    Event,
    Iteration,
    Merge,
    Reflection,
    Rollout,
    RunEnd,
    RunStart,
    Stage,
    TraceWriter,
    event_to_dict,
)
from pxn.trace_reading import load_traces, read_trace


def header() -> RunStart:
    return RunStart(
        start=0.0,
        end=0.0,
        source="sim",
        shape="1x1",
        budget=10,
        workers=2,
        reflection_concurrency=1,
        valset_size=2,
        trainset_size=5,
        minibatch=1,
        seed=0,
        meta={"note": "hand-made"},
    )


def tiny_run() -> list[Event]:
    """Seed val of 2 on 2 workers, one iteration whose child is accepted and validated."""

    def rollout(start, end, phase, worker, candidate, example, iteration=1):
        return Rollout(
            start=start,
            end=end,
            iteration=iteration,
            phase=phase,
            worker=worker,
            candidate=candidate,
            example=example,
        )

    return [
        header(),
        rollout(0.0, 1.0, "seed_val", 0, "0", "val:0", iteration=0),
        rollout(0.0, 2.0, "seed_val", 1, "0", "val:1", iteration=0),
        Stage(start=0.0, end=2.0, iteration=0, name="seed_val"),
        rollout(2.5, 3.5, "parent_minibatch", 0, "0", "train:0"),
        Stage(start=2.5, end=3.5, iteration=1, name="parent_minibatch"),
        Reflection(start=3.5, end=8.5, iteration=1, slot=0, proposal="1-0", parent="0"),
        Stage(start=3.5, end=8.5, iteration=1, name="reflection"),
        rollout(8.5, 9.5, "child_minibatch", 0, "1-0", "train:0"),
        Stage(start=8.5, end=9.5, iteration=1, name="child_minibatch"),
        Decision(
            start=9.5,
            end=9.5,
            iteration=1,
            proposal="1-0",
            parent="0",
            accepted=True,
            candidate="1",
        ),
        rollout(9.5, 11.0, "full_val", 0, "1", "val:0"),
        rollout(9.5, 10.5, "full_val", 1, "1", "val:1"),
        Stage(start=9.5, end=11.0, iteration=1, name="full_val"),
        Iteration(start=2.5, end=11.0, iteration=1),
        RunEnd(start=12.0, end=12.0, status="completed", metric_calls=6, iterations=1),
    ]


def write(path: Path, events: list[Event]) -> Path:
    with TraceWriter(path) as writer:
        for event in events:
            writer.write(event)
    return path


def lines_of(events: list[Event]) -> list[str]:
    return [json.dumps(event_to_dict(e)) for e in events]


def test_written_events_read_back_equal(tmp_path: Path) -> None:
    events = tiny_run()
    trace = read_trace(write(tmp_path / "t.jsonl", events))
    assert trace.events == events
    assert trace.skipped == []
    assert trace.run_start.schema == SCHEMA_VERSION
    assert trace.run_end == events[-1]
    assert len(trace.of(Rollout)) == 6


def test_writer_never_overwrites(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", tiny_run()[:2])
    with pytest.raises(FileExistsError):
        TraceWriter(path)
    with TraceWriter(path, append=True) as writer:  # resuming appends instead
        writer.write(tiny_run()[2])
    assert len(read_trace(path).events) == 3


def test_summary_of_a_hand_made_run(tmp_path: Path) -> None:
    summary = summarize(read_trace(write(tmp_path / "t.jsonl", tiny_run())))
    assert summary.wall_clock == 12.0
    assert (summary.iterations, summary.full_val_iterations) == (1, 1)
    assert (summary.proposals, summary.accepted, summary.metric_calls) == (1, 1, 6)
    assert summary.full_val_share == 1.0
    assert summary.stage_time == {
        "seed_val": 2.0,
        "merge_subsample": 0.0,
        "parent_minibatch": 1.0,
        "reflection": 5.0,
        "child_minibatch": 1.0,
        "full_val": 1.5,
        "overhead": 12.0 - 10.5,
    }
    busy = 1 + 2 + 1 + 1 + 1.5 + 1
    assert summary.utilisation == pytest.approx(busy / (2 * 12.0))


def merge_iterations(accepted: bool) -> list[Event]:
    """Iteration 2 of tiny_run's run: gepa merges candidates 1 and 2 (a merge the tests make
    up: tiny_run has no candidate 2), scored on 2 validation examples, and validates the
    merged program in full when it is accepted."""

    def rollout(start, end, phase, candidate, example):
        return Rollout(start=start, end=end, iteration=2, phase=phase, worker=0,
                       candidate=candidate, example=example)  # fmt: skip

    merged = [
        rollout(12.0, 13.0, "merge_subsample", "2-merge", "val:0"),
        rollout(13.0, 14.0, "merge_subsample", "2-merge", "val:1"),
        Stage(start=12.0, end=14.0, iteration=2, name="merge_subsample"),
    ]
    verdict = Merge(
        start=16.0,
        end=16.0,
        iteration=2,
        proposal="2-merge",
        parents="1,2",
        ancestor="0",
        accepted=accepted,
        candidate="3" if accepted else None,
        score_before=1.0,
        score_after=2.0 if accepted else 0.0,
    )
    validated = [
        rollout(14.0, 15.0, "full_val", "2-merge", "val:0"),
        rollout(15.0, 16.0, "full_val", "2-merge", "val:1"),
        Stage(start=14.0, end=16.0, iteration=2, name="full_val"),
    ]
    return [
        *merged,
        *(validated if accepted else []),
        verdict,
        Iteration(start=12.0, end=16.0, iteration=2),
    ]


@pytest.mark.parametrize("accepted", [True, False])
def test_a_merge_iteration_is_summarized_as_no_reflective_step(tmp_path: Path, accepted) -> None:
    run = tiny_run()
    events = [*run[:-1], *merge_iterations(accepted), replace(run[-1], start=16.0, end=16.0)]
    trace = read_trace(write(tmp_path / "t.jsonl", events))
    assert trace.skipped == [] and trace.of(Merge)[0].parents == "1,2"
    summary = summarize(trace)
    assert (summary.merges, summary.merges_accepted) == (1, int(accepted))
    # The merge iteration made no proposal, and that is no skip: the proposals are
    # still the one iteration's.
    assert (summary.iterations, summary.proposals, summary.skipped) == (2, 1, 0)
    assert summary.accepted == 1  # a merge is not a reflective proposal
    assert summary.stage_time["merge_subsample"] == 2.0
    assert summary.full_val_iterations == 1 + accepted
    assert summary.metric_calls == 6 + 2 + 2 * accepted


def test_a_version_1_trace_still_reads(tmp_path: Path) -> None:
    """Version 1 is version 2 without merges: its events read and summarize as they did."""
    lines = lines_of(tiny_run())
    first = json.loads(lines[0]) | {"schema": 1}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]), encoding="utf-8")
    trace = read_trace(path)
    assert trace.run_start.schema == 1 and trace.skipped == []
    assert trace.events[1:] == tiny_run()[1:]
    assert summarize(trace) == summarize(read_trace(write(tmp_path / "v2.jsonl", tiny_run())))


def test_truncated_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25], encoding="utf-8")
    trace = read_trace(path)
    assert trace.skipped == [f"line {len(lines)}: truncated last line"]
    assert len(trace.events) == len(lines) - 1
    assert trace.run_end is None
    # Without a run_end the wall-clock is the last event's end.
    assert summarize(trace).wall_clock == 11.0


def test_bad_json_in_the_middle_is_not_called_truncation(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    lines[3] = "{not json"
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_trace(path).skipped == ["line 4: not valid JSON"]


def test_unknown_kind_and_missing_field_are_skipped_with_line_numbers(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    future = json.dumps({"kind": "gpu_sample", "start": 1.0, "end": 1.0, "util": 0.5})
    broken = json.loads(lines[4])
    del broken["worker"]
    lines = [*lines[:2], future, *lines[2:4], json.dumps(broken), *lines[5:]]
    path = tmp_path / "t.jsonl"
    path.write_text("\n\n".join(lines), encoding="utf-8")  # blank lines are ignored
    trace = read_trace(path)
    assert trace.skipped == [
        "line 5: unknown event kind 'gpu_sample'",
        "line 11: rollout event lacks field(s) worker",
    ]
    assert len(trace.events) == len(tiny_run()) - 1


def test_fields_from_a_newer_writer_are_ignored(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    extra = json.loads(lines[1]) | {"gpu": 3}
    lines[1] = json.dumps(extra)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    trace = read_trace(path)
    assert trace.skipped == [] and trace.events[1] == tiny_run()[1]


def test_a_reflection_without_prefix_tokens_reads_as_unknown(tmp_path: Path) -> None:
    """prefix_tokens is optional in schema 1: an older writer's reflection lacks it."""
    lines = lines_of(tiny_run())
    older = json.loads(lines[6])
    assert older["kind"] == "reflection"
    del older["prefix_tokens"]
    counted = json.loads(lines[6]) | {"tokens_in": 900, "prefix_tokens": 300}
    fractional = json.loads(lines[6]) | {"prefix_tokens": 2.5}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([*lines[:6], *map(json.dumps, (older, counted, fractional))]))
    trace = read_trace(path)
    assert trace.skipped == ["line 9: reflection field prefix_tokens has a bad value 2.5"]
    assert [r.prefix_tokens for r in trace.of(Reflection)] == [None, 300]


def test_wrong_schema_version_raises(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    first = json.loads(lines[0]) | {"schema": SCHEMA_VERSION + 1}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]), encoding="utf-8")
    with pytest.raises(PxnError, match=f"schema version {SCHEMA_VERSION + 1}"):
        read_trace(path)


@pytest.mark.parametrize("content", ["", "\n\n"], ids=["empty", "blank"])
def test_empty_trace_raises(content: str, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PxnError, match="holds no events"):
        read_trace(path)


def test_not_a_trace_raises(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"name": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(PxnError, match="starts with a run_start"):
        read_trace(path)
    with pytest.raises(PxnError, match="cannot read trace"):
        read_trace(tmp_path / "absent.jsonl")


def test_values_of_the_wrong_type_are_skipped_with_line_numbers(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    soon = json.loads(lines[1]) | {"start": "soon"}
    boolean_worker = json.loads(lines[2]) | {"worker": True}
    backwards = json.loads(lines[4]) | {"start": 5.0, "end": 4.0}
    lines = [
        lines[0],
        json.dumps(soon),
        json.dumps(boolean_worker),
        lines[3],
        json.dumps(backwards),
    ]
    lines += ['"just a string"', *lines_of(tiny_run())[5:]]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    trace = read_trace(path)
    assert trace.skipped == [
        "line 2: rollout field start has a bad value 'soon'",
        "line 3: rollout field worker has a bad value True",
        "line 5: rollout ends (4.0) before it starts (5.0)",
        "line 6: not a JSON object",
    ]
    assert all(type(e.start) in (int, float) for e in trace.events)


def test_a_damaged_run_start_is_named_at_its_own_line(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    first = json.loads(lines[0])
    del first["workers"]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]), encoding="utf-8")
    with pytest.raises(PxnError, match="line 1: run_start event lacks field"):
        read_trace(path)


def test_a_binary_file_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "figure.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(PxnError, match="not a text file"):
        read_trace(path)


def test_a_resume_drops_the_work_gepa_redid(tmp_path: Path) -> None:
    from pxn.trace import Resume

    run = tiny_run()
    # The crash came during iteration 1; gepa resumed from the state saved before it
    # (0 iterations done, 2 metric calls: the seed validation) and redid iteration 1.
    iteration_one = run[4:-1]
    resumed = [*run[:-1], Resume(start=20.0, end=20.0, iteration=0, metric_calls=2)]
    shifted = [type(e)(**{**e.__dict__, "start": e.start + 20, "end": e.end + 20})
               for e in iteration_one]  # fmt: skip
    end = RunEnd(start=32.0, end=32.0, status="completed", metric_calls=6, iterations=1)
    summary = summarize(read_trace(write(tmp_path / "t.jsonl", [*resumed, *shifted, end])))
    assert summary.metric_calls == 6  # not 10: the first try of iteration 1 does not count
    assert summary.iterations == 1 and summary.accepted == 1 and summary.proposals == 1


# -- a run is one file, and each run is given once -------------------------------------


def test_two_runs_in_one_file_are_refused_at_the_second_run_start(tmp_path: Path) -> None:
    # Read as one run, the second run's iterations and rollouts once counted as the first's.
    lines = lines_of(tiny_run())
    path = tmp_path / "both.jsonl"
    path.write_text("\n".join(lines + lines) + "\n", encoding="utf-8")
    second = len(lines) + 1
    with pytest.raises(PxnError) as caught:
        read_trace(path)
    assert str(caught.value) == (
        f"{path} line {second}: a second run_start: the file holds two runs one after the "
        f"other; split it there (head -n {second - 1} and tail -n +{second}) and give each "
        "run its own file"
    )


def test_the_split_the_refusal_advises_gives_two_readable_runs(tmp_path: Path) -> None:
    lines = lines_of(tiny_run())
    first, second = len(lines), len(lines) + 1
    both = [*lines, *lines]
    assert read_trace(write_lines(tmp_path / "a.jsonl", both[:first])).events == tiny_run()
    assert read_trace(write_lines(tmp_path / "b.jsonl", both[second - 1 :])).events == tiny_run()


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def a_run_directory(root: Path, name: str, events: list[Event]) -> Path:
    run = root / name
    run.mkdir()
    write(run / "trace.jsonl", events)
    return run


def test_a_run_given_twice_is_refused_naming_both_paths(tmp_path: Path) -> None:
    run = a_run_directory(tmp_path, "run", tiny_run())
    trace = run / "trace.jsonl"
    detour = tmp_path / "run" / ".." / "run"
    copy = a_run_directory(tmp_path, "copy", tiny_run())
    assert load_error([run, run]) == f"{trace} is given twice: give each run once"
    assert load_error([run, detour]) == (
        f"{trace} and {detour / 'trace.jsonl'} are the same file: give each run once"
    )
    assert load_error([run, copy]) == (
        f"{trace} and {copy / 'trace.jsonl'} hold the same run (the same events, one for one): "
        "give each run once"
    )


def load_error(paths: list[Path]) -> str:
    with pytest.raises(PxnError) as caught:
        load_traces(paths)
    return str(caught.value)


def test_two_runs_of_one_setup_are_two_runs(tmp_path: Path) -> None:
    later = replace(header(), started_at="2026-01-01T10:00:00+00:00")
    one = a_run_directory(tmp_path, "one", tiny_run())
    two = a_run_directory(tmp_path, "two", [later, *tiny_run()[1:]])
    # The same start, but it ended otherwise (a copy edited since is another run).
    *events, end = tiny_run()
    three = a_run_directory(tmp_path, "three", [*events, replace(end, start=20.0, end=20.0)])
    assert len(load_traces([one, two, three]).traces) == 3
