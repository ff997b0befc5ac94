"""`pxn trace ...`: traces converted for other tools: Chrome's trace event format, to look
at in Perfetto or chrome://tracing.

Each rollout and reflection is a complete ("X") event, timed in microseconds,
on its own thread row: process 1 holds the W workers' rows, process 2 the C
reflections' rows, and process 0 the engine (the stages and iterations).
Decisions are instant ("i") events on the engine. Metadata ("M") events name
the processes and rows so the viewer shows "worker 3", not "tid 3".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from pxn.api.console import print_set_aside, say
from pxn.app.output import check_writable, refuse_overwriting_an_input
from pxn.trace import Decision, Iteration, Reflection, Rollout, Stage
from pxn.trace_reading import Trace

commands = typer.Typer(help="Convert traces for other tools.", no_args_is_help=True)


@commands.command("export")
def trace_export(
    trace: Annotated[Path, typer.Argument(help="A trace file or run directory.")],
    chrome: Annotated[Path, typer.Option(help="Chrome trace JSON to write (open in Perfetto).")],
) -> None:
    """Write a trace in Chrome's trace event format, for Perfetto or chrome://tracing."""
    from pxn.files import write_text_atomically
    from pxn.trace_reading import read_one

    check_writable(chrome, "chrome")
    refuse_overwriting_an_input(chrome, [trace], "chrome")
    the_trace = read_one(trace)
    print_set_aside([], [f"{the_trace.path} {line}" for line in the_trace.skipped])
    write_text_atomically(chrome, json.dumps(chrome_trace(the_trace), allow_nan=False))
    say(f"wrote {chrome}")


ENGINE, WORKERS, REFLECTIONS = 0, 1, 2
STAGE_ROW, ITERATION_ROW = 0, 1
MICROSECONDS = 1e6


def _us(seconds: float) -> float:
    return round(seconds * MICROSECONDS, 3)


def _args(event: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(event, name) for name in names if getattr(event, name) is not None}


def _complete(name: str, cat: str, event: Any, pid: int, tid: int, args: dict[str, Any]) -> dict:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": _us(event.start),
        # From the rounded ends, so back-to-back calls on a row never overlap by rounding.
        "dur": round(_us(event.end) - _us(event.start), 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _name(pid: int, tid: int | None, name: str) -> dict:
    """A process's name (`tid` None) or a thread row's."""
    kind = "process_name" if tid is None else "thread_name"
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid or 0, "args": {"name": name}}


def chrome_trace(trace: Trace) -> dict[str, Any]:
    """The whole trace as a Chrome trace document (a dict ready for json.dumps)."""
    start = trace.run_start
    events: list[dict[str, Any]] = [
        _name(ENGINE, None, f"gepa engine ({start.shape}, {start.source})"),
        _name(ENGINE, STAGE_ROW, "stages"),
        _name(ENGINE, ITERATION_ROW, "iterations"),
        _name(WORKERS, None, f"rollout workers (W={start.workers})"),
        _name(REFLECTIONS, None, f"reflections (C={start.reflection_concurrency})"),
    ]
    rollouts, reflections = trace.of(Rollout), trace.of(Reflection)
    events += [_name(WORKERS, w, f"worker {w}") for w in sorted({r.worker for r in rollouts})]
    slots = sorted({r.slot for r in reflections})
    events += [_name(REFLECTIONS, s, f"reflection {s}") for s in slots]
    for it in trace.of(Iteration):
        events.append(
            _complete(f"iteration {it.iteration}", "iteration", it, ENGINE, ITERATION_ROW, {})
        )
    for stage in trace.of(Stage):
        args = {"iteration": stage.iteration}
        events.append(_complete(stage.name, "stage", stage, ENGINE, STAGE_ROW, args))
    for r in rollouts:
        args = _args(
            r,
            ("iteration", "candidate", "example", "score", "tokens_in", "tokens_out", "error"),
        )
        args["attempts"] = r.attempts
        events.append(_complete(r.phase, r.phase, r, WORKERS, r.worker, args))
    for r in reflections:
        args = _args(r, ("iteration", "proposal", "parent", "tokens_in", "tokens_out", "error"))
        events.append(
            _complete(f"reflect {r.proposal}", "reflection", r, REFLECTIONS, r.slot, args)
        )
    for d in trace.of(Decision):
        events.append(
            {
                "name": f"{d.proposal} {'accepted' if d.accepted else 'rejected'}",
                "cat": "decision",
                "ph": "i",
                "s": "p",  # drawn across the engine's rows
                "ts": _us(d.start),
                "pid": ENGINE,
                "tid": STAGE_ROW,
                "args": _args(d, ("iteration", "parent", "candidate", "accepted")),
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"source": start.source, "shape": start.shape, "trace": str(trace.path)},
    }
