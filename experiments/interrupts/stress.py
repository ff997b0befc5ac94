"""Ctrl-C at random moments of dspy.GEPA compiles, recorded and not: how long each takes to stop.

    .venv/bin/python experiments/interrupts/stress.py [--interrupted 22] [--seed 0]
        [--shapes single 2x2] [--budget 16]

Runs compile.py (tests/dspy_program.py's program, a budget of 16 metric calls,
num_threads=2) against a local LM pool (2 llama.cpp servers, SmolLM2-135M: one the
task LM, one the reflection LM). Before a shape's first round, one uninterrupted
recorded compile measures how long a compile lasts (its span). Round after round, the
shapes in turn, one moment is drawn uniformly over the shape's span (seeded) and two
compiles of that shape are interrupted at it, one recorded and one not, in an order
that alternates: each is started, the moment is counted from the line compile.py
writes as compile starts, and SIGINT is sent as a terminal's Ctrl-C sends it. Its time
to stop runs from the signal to the process's end. A compile still running DUMP_AFTER
seconds after the signal has its threads' stacks dumped into its log (SIGUSR1), and
one still running at GIVE_UP is killed and counted as hung. What the signal met:
"gepa running", "after gepa" (gepa.optimize had returned: DSPy was building the
program) or "ended first" (the process had ended; nothing was sent). The rounds go on
until `--interrupted` recorded compiles were stopped while gepa ran.

The compiles run under the machine lock (/tmp/lm.lock), each time it is taken with a
pool started and stopped inside it; it is let go before a round that would keep it
longer than HOLD seconds (the round's moment is drawn beforehand), so other users of
the LM interleave.

Every recorded compile's trace then goes to `pxn calibrate --draws 10`: it must
calibrate, or be refused in one line (exit 2, no traceback). --rejudge WORK does that
again for the traces of a run kept in WORK (after a fix).

--standin: the same against two stand-in servers (standin.py) instead of the local
LM, without the lock and at the lowest priority (SCHED_IDLE), so that many more compiles
are interrupted than the local LM's time allows: a hang shows (GIVE_UP is far beyond any
stop), the times to stop are not comparable with the LM's.

Writes results.json and results.csv (results-standin.*) beside this file (one row per
compile) after every hold of the lock, and prints the table and the summary README.md
holds (--summarise prints them again). The logs and traces stay in a temporary
directory the output names.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPILE = HERE / "compile.py"
PXN = Path(sys.executable).parent / "pxn"
LOCK = Path("/tmp/lm.lock")  # the machine's: whoever runs the local LM or times holds it
STARTED = b"stress: compiling"  # compile.py's lines
GEPA_RETURNED = b"stress: gepa returned"
DUMP_AFTER = 20.0  # seconds after SIGINT: the threads of a compile still running are dumped
GIVE_UP = 60.0  # seconds after SIGINT: a compile still running is killed, counted as hung
POLL = 0.05
HOLD = 180.0  # seconds the lock is held at most for rounds after the first of an acquisition
OVERHEAD = 15.0  # seconds a compile takes beyond its moment: its imports and its stop
LOWEST = ["chrt", "-i", "0", "nice", "-n", "19"]  # SCHED_IDLE: CPU work that is not timed


@dataclass
class Outcome:
    round: int
    shape: str
    arm: str  # "recorded" or "unrecorded"
    moment: float  # seconds after compile started that the SIGINT was sent (drawn)
    met: str  # what the signal met: "gepa running", "after gepa" or "ended first"
    stopped: str  # "stopped", "hung" (killed at GIVE_UP) or "" (no signal sent)
    seconds_to_stop: float | None  # from the SIGINT to the process's end
    exit_code: int | None
    run_end: str  # recorded: the trace's run_end status ("none" without one)
    where: str  # recorded: the phase of the last rollout or reflection before run_end
    calibrate: str  # recorded: "calibrates", "refused: LINE" or "FAILED ..."


def ctrl_c_as_a_terminal_gives_it() -> None:
    """In the child before exec: SIGINT at its default and unblocked (an ignored SIGINT
    survives exec, and Python installs its Ctrl-C handler only where it is not ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start(
    out: Path, log: Path, servers: list[str], shape: str, budget: int, recorded: bool
) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(COMPILE), str(out), *servers, "--shape", shape]
    args += ["--budget", str(budget)]
    if not recorded:
        args.append("--unrecorded")
    with log.open("wb") as sink:  # a file, not a pipe: a full pipe would stall the child
        return subprocess.Popen(
            args,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            preexec_fn=ctrl_c_as_a_terminal_gives_it,
        )


def wait_started(proc: subprocess.Popen[bytes], log: Path) -> float:
    """The moment the child's compile started (its imports done), on this clock."""
    while STARTED not in log.read_bytes():
        if proc.poll() is not None:
            raise SystemExit(f"the compile ended before it started: see {log}")
        time.sleep(POLL)
    return time.monotonic()


def measure_span(work: Path, shape: str, servers: list[str], budget: int) -> float:
    """Seconds an uninterrupted recorded compile of `shape` lasts, from its start to its end."""
    log = work / f"span-{shape}.log"
    proc = start(work / f"span-{shape}", log, servers, shape, budget, recorded=True)
    began = wait_started(proc, log)
    if proc.wait(timeout=GIVE_UP * 4) != 0:
        raise SystemExit(f"the uninterrupted compile failed: see {log}")
    return time.monotonic() - began


def interrupt(
    round_: int,
    shape: str,
    moment: float,
    recorded: bool,
    work: Path,
    servers: list[str],
    budget: int,
) -> Outcome:
    arm = "recorded" if recorded else "unrecorded"
    out, log = work / f"{round_}-{arm}", work / f"{round_}-{arm}.log"
    proc = start(out, log, servers, shape, budget, recorded)
    began = wait_started(proc, log)
    while time.monotonic() < began + moment and proc.poll() is None:
        time.sleep(min(POLL, max(began + moment - time.monotonic(), 0.0)))
    met, stopped, seconds = "ended first", "", None
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        met = "after gepa" if GEPA_RETURNED in log.read_bytes() else "gepa running"
        stopped = "stopped"
        try:
            proc.wait(timeout=DUMP_AFTER)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
            try:
                proc.wait(timeout=GIVE_UP - DUMP_AFTER)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                stopped = "hung"
        seconds = time.monotonic() - sent
    code = proc.returncode
    return Outcome(round_, shape, arm, moment, met, stopped, seconds, code, "", "", "")


def judge(outcome: Outcome, work: Path) -> None:
    """A recorded compile's trace: how it ends, and what `pxn calibrate` makes of it."""
    out = work / f"{outcome.round}-recorded"
    outcome.run_end, outcome.where = trace_end(out / "trace.jsonl")
    outcome.calibrate = calibrate(out)


def trace_end(path: Path) -> tuple[str, str]:
    """(run_end's status, the phase of the last rollout or reflection before it)."""
    from pxn.trace import Reflection, Rollout
    from pxn.trace_reading import read_trace

    if not path.exists():
        return "no trace", ""
    trace = read_trace(path)
    status = trace.run_end.status if trace.run_end is not None else "none"
    calls = [e for e in trace.events if isinstance(e, Rollout | Reflection)]
    if not calls:
        return status, "before any rollout"
    last = max(calls, key=lambda e: e.start)
    phase = last.phase if isinstance(last, Rollout) else "reflection"
    return status, f"{phase} (iteration {last.iteration})"


def calibrate(out: Path) -> str:
    """What `pxn calibrate` makes of the trace: it calibrates, or refuses in one line."""
    if not (out / "trace.jsonl").exists():
        return "no trace"
    scenario = out / "scenario.toml"
    done = subprocess.run(  # CPU only, untimed: at the lowest priority, outside the lock
        [*LOWEST, str(PXN), "calibrate", str(out), "-o", str(scenario), "--draws", "10"],
        capture_output=True,
        text=True,
    )
    lines = done.stderr.strip().splitlines()
    if done.returncode == 0:
        return "calibrates"
    if done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr:
        return f"refused: {lines[0].removeprefix('pxn: error: ')}"
    return f"FAILED (exit {done.returncode}): {lines[-1] if lines else ''}"


def summary(outcomes: list[Outcome]) -> list[str]:
    """Per shape and arm: what the signals met, how long the compiles gepa was running in took
    to stop, the hung ones, the exit codes and, recorded, what pxn calibrate made of them."""
    lines = [
        "| shape | arm | compiles | SIGINT met gepa running / after gepa / ended first | "
        "stopped in (s), gepa running: median, max | hung | exit codes | pxn calibrate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in sorted({o.shape for o in outcomes}, key=lambda s: s != "single"):
        for arm in ("recorded", "unrecorded"):
            mine = [o for o in outcomes if o.arm == arm and o.shape == shape]
            stops = [
                o.seconds_to_stop
                for o in mine
                if o.met == "gepa running" and o.stopped == "stopped" and o.seconds_to_stop
            ]
            figures = f"{statistics.median(stops):.2f}, {max(stops):.2f}" if stops else "-"
            met = " / ".join(str(sum(o.met == m for o in mine)) for m in MET)
            hung = sum(o.stopped == "hung" for o in mine)
            codes = [o.exit_code for o in mine]
            exits = ", ".join(f"{c} x{codes.count(c)}" for c in sorted(set(codes), key=str))
            verdicts = [o.calibrate.split(":")[0].split(" (")[0] for o in mine if o.calibrate]
            said = ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts))) or "-"
            lines.append(
                f"| {shape} | {arm} | {len(mine)} | {met} | {figures} | {hung} | {exits} | {said} |"
            )
    refusals = sorted(
        {o.calibrate.split(" (")[0] for o in outcomes if o.calibrate[:7] == "refused"}
    )
    return [*lines, "", *(f"- {r}" for r in refusals)]


MET = ("gepa running", "after gepa", "ended first")


def table(outcomes: list[Outcome]) -> list[str]:
    rows = [
        "| round | shape | arm | SIGINT at (s) | met | stopped in (s) | exit | run_end | "
        "last call | pxn calibrate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        seconds = {"stopped": f"{o.seconds_to_stop or 0:.2f}", "hung": "hung", "": "-"}
        rows.append(
            f"| {o.round} | {o.shape} | {o.arm} | {o.moment:.1f} | {o.met} | "
            f"{seconds[o.stopped]} | {o.exit_code} | {o.run_end or '-'} | {o.where or '-'} | "
            f"{o.calibrate or '-'} |"
        )
    return rows


@contextmanager
def standins() -> Iterator[list[str]]:
    """Two stand-in LM servers (standin.py: the task's answering in 0.3 s, the reflection's
    in 1.5 s, on average), their API bases."""
    from pxn.runner.lm_pool import free_port

    ports = [free_port(), free_port()]
    servers = [
        subprocess.Popen([sys.executable, str(HERE / "standin.py"), str(port), seconds])
        for port, seconds in zip(ports, ("0.3", "1.5"), strict=True)
    ]
    try:
        for port in ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(POLL)
        yield [f"http://127.0.0.1:{port}/v1" for port in ports]
    finally:
        for server in servers:
            server.terminate()
            server.wait()


@contextmanager
def machine(given: list[str] | None) -> Iterator[list[str]]:
    """The machine lock held, and the task and reflection LMs' API bases: those given, or a
    pool of two started (and stopped) under the lock."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if given:
                yield given
                return
            from pxn.runner.lm_pool import LMPool

            with LMPool(2) as pool:
                yield [server.api_base for server in pool.servers[:2]]
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_results(name: str, setup: dict[str, object], outcomes: list[Outcome]) -> None:
    rows = [asdict(o) for o in outcomes]
    data = {"setup": setup, "compiles": rows}
    (HERE / f"{name}.json").write_text(json.dumps(data, indent=1))
    with (HERE / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--interrupted", type=int, default=22, help="recorded compiles to stop while gepa runs"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=16, help="each compile's max_metric_calls")
    parser.add_argument("--shapes", nargs="+", default=["single", "2x2"], help="taken in turn")
    parser.add_argument(
        "--servers", nargs=2, metavar="API_BASE", help="the task and reflection LMs' servers "
        "to use (under the lock) instead of starting a pool"
    )  # fmt: skip
    parser.add_argument(
        "--standin", action="store_true", help="against two stand-in servers (standin.py), "
        "without the lock, at the lowest priority: hangs counted, times not comparable"
    )  # fmt: skip
    parser.add_argument(
        "--summarise", action="store_true", help="print the table and summary of the results "
        "written (results.json, or results-standin.json with --standin) and stop"
    )  # fmt: skip
    parser.add_argument(
        "--rejudge", metavar="WORK", type=Path, help="run pxn calibrate again on the recorded "
        "compiles' traces in WORK (the directory a run named) and rewrite the results"
    )  # fmt: skip
    args = parser.parse_args()
    name = "results-standin" if args.standin else "results"
    if args.rejudge:
        written = json.loads((HERE / f"{name}.json").read_text())
        outcomes = [Outcome(**row) for row in written["compiles"]]
        for outcome in outcomes:
            if outcome.arm == "recorded":
                judge(outcome, args.rejudge)
        written["setup"]["judged"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        write_results(name, written["setup"], outcomes)
        return
    if args.summarise:
        written = json.loads((HERE / f"{name}.json").read_text())
        outcomes = [Outcome(**row) for row in written["compiles"]]
        print(
            "\n".join([json.dumps(written["setup"]), "", *table(outcomes), "", *summary(outcomes)])
        )
        return
    if args.standin:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # inherited: the children too
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="pxn-interrupts-"))
    print(f"logs and traces in {work}", flush=True)
    setup: dict[str, object] = {
        "began": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seed": args.seed,
        "budget": args.budget,
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}",
        "servers": "stand-ins (standin.py), SCHED_IDLE, no lock"
        if args.standin
        else "given"
        if args.servers
        else "LMPool(2), SmolLM2-135M, one per lock held",
        "dump_after_seconds": DUMP_AFTER,
        "hung_after_seconds": GIVE_UP,
    }
    spans: dict[str, float] = {}
    outcomes: list[Outcome] = []
    round_, moment = 0, None

    def interrupted(*more: Outcome) -> int:
        return sum(o.arm == "recorded" and o.met == "gepa running" for o in [*outcomes, *more])

    while interrupted() < args.interrupted:
        done: list[Outcome] = []
        with standins() if args.standin else machine(args.servers) as servers:
            held = time.monotonic()
            while interrupted(*done) < args.interrupted:
                shape = args.shapes[round_ % len(args.shapes)]
                if shape not in spans:
                    if done:
                        break  # its span and its round: at the start of the next hold
                    spans[shape] = measure_span(work, shape, servers, args.budget)
                    print(f"an uninterrupted {shape} compile: {spans[shape]:.1f} s", flush=True)
                if moment is None:  # drawn once, whether the round runs now or next time
                    moment = rng.uniform(0.0, spans[shape])
                if time.monotonic() - held + 2 * (moment + OVERHEAD) > HOLD and done:
                    break  # the round would hold the lock too long: after the others
                recorded_first = (round_ // len(args.shapes)) % 2 == 0
                done += [
                    interrupt(round_, shape, moment, recorded, work, servers, args.budget)
                    for recorded in ((True, False) if recorded_first else (False, True))
                ]
                round_, moment = round_ + 1, None
        for outcome in done:
            if outcome.arm == "recorded":
                judge(outcome, work)
            outcomes.append(outcome)
            print(table(outcomes)[-1], flush=True)
        setup["span_seconds"] = {shape: round(span, 2) for shape, span in spans.items()}
        setup["ended"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        write_results(name, setup, outcomes)
    print("\n".join(["", *table(outcomes), "", *summary(outcomes)]))


if __name__ == "__main__":
    main()
