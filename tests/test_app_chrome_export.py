"""Chrome trace export: the structure Perfetto and chrome://tracing read."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from calibrate_helpers import TRUE, write_traces
from conftest import run_pxn

from pxn.app.commands.trace import REFLECTIONS, WORKERS, chrome_trace
from pxn.shape import Shape
from pxn.trace import Iteration, Reflection, Rollout, Stage
from pxn.trace_reading import Trace, read_one


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    small = TRUE.replace(budget=300)
    [run] = write_traces(tmp_path_factory.mktemp("run"), small, Shape(2, 2), range(1))
    return read_one(run)


def test_every_call_is_a_complete_event_in_microseconds(trace: Trace) -> None:
    events = chrome_trace(trace)["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    expected = sum(len(trace.of(c)) for c in (Rollout, Reflection, Stage, Iteration))
    assert len(complete) == expected
    for e in complete:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["dur"] >= 0 and isinstance(e["tid"], int)
    rollouts = [e for e in complete if e["pid"] == WORKERS]
    for event, rollout in zip(rollouts, trace.of(Rollout), strict=True):
        assert event["ts"] == pytest.approx(rollout.start * 1e6, abs=1e-3)
        assert event["dur"] == pytest.approx(rollout.duration * 1e6, abs=1e-3)
        assert event["tid"] == rollout.worker
        assert event["name"] == rollout.phase
        assert event["args"]["example"] == rollout.example
    slots = {e["tid"] for e in complete if e["pid"] == REFLECTIONS}
    assert slots == {r.slot for r in trace.of(Reflection)}


def test_rows_are_named_and_calls_on_one_row_do_not_overlap(trace: Trace) -> None:
    events = chrome_trace(trace)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    workers = {r.worker for r in trace.of(Rollout)}
    assert {names[WORKERS, w] for w in workers} == {f"worker {w}" for w in workers}
    by_row: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X" and e["pid"] in (WORKERS, REFLECTIONS):
            by_row.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_row.values():
        spans.sort()
        assert all(end <= nxt + 1e-3 for (_, end), (nxt, _) in itertools.pairwise(spans))


def test_cli_writes_valid_json(trace: Trace, tmp_path: Path) -> None:
    out = tmp_path / "chrome.json"
    result = run_pxn("trace", "export", trace.path, "--chrome", out)
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["displayTimeUnit"] == "ms"
    assert document["traceEvents"] == json.loads(json.dumps(chrome_trace(trace)))["traceEvents"]
    missing = run_pxn("trace", "export", tmp_path / "nope", "--chrome", tmp_path / "x.json")
    assert missing.returncode == 2 and not (tmp_path / "x.json").exists()
