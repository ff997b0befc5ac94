"""The files gepa 0.1.4 leaves in a run_dir (dspy.GEPA's log_dir), read and checked.

gepa saves `gepa_state.bin`, then `run_log.json` and `candidates.json` at the top of
every iteration and once at the end, each through a `.tmp` file. Read: run_log.json
(required: the tasks, parents, minibatch scores, new programs, merges), candidates.json
(the programs and their components), gepa_state.bin only through safe_pickle (optional:
the validation scores, parents and gepa's metric-call count; one naming what no gepa
state holds, such as the adapter's own outputs gepa keeps by default, is left unread and
said to be) and run_log.txt where gepa wrote its log there (gepa_log.py: the validation
scores where the state is not read). Every way a directory is unusable (empty, foreign,
still being written, cut short, another state schema) is one PxnError line saying what
to give instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pxn.calibrate.past_runs.safe_pickle import Refused, load_admitted
from pxn.errors import PxnError

RUN_LOG, CANDIDATES, STATE = "run_log.json", "candidates.json", "gepa_state.bin"
GEPA_LOG = "run_log.txt"
STATE_SCHEMA = 5  # GEPAState._VALIDATION_SCHEMA_VERSION in gepa 0.1.4
# What a run_dir holds; any of them marks a directory as gepa's.
GEPA_FILES = (RUN_LOG, CANDIDATES, STATE, GEPA_LOG, "candidate_tree.html")
GIVE_IT = "give the run_dir= (dspy.GEPA's log_dir=) the run was given"


@dataclass(frozen=True)
class GepaState:
    """What pxn reads of gepa_state.bin (the rest it leaves alone)."""

    val_scores: tuple[dict[Any, float], ...]  # per candidate: validation id -> score
    parents: tuple[tuple[int | None, ...], ...]  # per candidate
    metric_calls: int  # total_num_evals
    iterations: int  # state.i + 1
    trace_length: int  # entries of its full_program_trace
    # dspy.GEPA's adapter keeps its random state there (DspyAdapter.get_adapter_state); no
    # adapter of gepa's own keeps any.
    dspy: bool


@dataclass(frozen=True)
class RunDirFiles:
    """A run_dir's files as gepa wrote them."""

    path: Path
    run_log: tuple[dict[str, Any], ...]
    candidates: tuple[dict[str, str], ...]
    state: GepaState | None
    log_lines: tuple[str, ...]  # run_log.txt's, when gepa wrote its log there
    state_note: str  # why the state was not read (absent, or refused unread), or "" when read


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a directory gepa wrote (it holds one of gepa's files), or an empty
    one (read_run_dir says what it lacks)."""
    if not path.is_dir():
        return False
    return any((path / name).exists() for name in GEPA_FILES) or not any(path.iterdir())


def read_run_dir(path: str | Path) -> RunDirFiles:
    """Read and check a run_dir; PxnError (one line) when it cannot be calibrated from."""
    path = Path(path)
    what = f"run_dir {path}"
    if not path.is_dir():
        raise PxnError(f"is not a directory: {GIVE_IT}", subject=what)
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        raise PxnError(
            f"is empty: a directory without a trace.jsonl (a pxn run directory's) or {RUN_LOG} "
            f"and {STATE} (a gepa run_dir's); give a run directory, or {GIVE_IT}",
            subject=what,
        )
    saving = [name for name in entries if name.endswith(".tmp")]
    if saving:
        raise PxnError(
            f"holds {saving[0]}: gepa is writing its state (the run is still going, or stopped "
            "mid-save); calibrate once the run has ended, or from a copy taken after it",
            subject=what,
        )
    if not (path / RUN_LOG).is_file():
        raise PxnError(_no_run_log(path, entries), subject=what)
    run_log = _run_log(path / RUN_LOG)
    candidates = _candidates(path / CANDIDATES)
    state, state_note = _state(path / STATE)
    _check_agreement(path, run_log, candidates, state)
    log_path = path / GEPA_LOG
    log_lines = (
        tuple(log_path.read_text(errors="replace").splitlines()) if log_path.is_file() else ()
    )
    return RunDirFiles(path, run_log, candidates, state, log_lines, state_note)


def _no_run_log(path: Path, entries: list[str]) -> str:
    if (path / STATE).exists():
        return (
            f"holds {STATE} but no {RUN_LOG}: gepa writes the run log once an iteration has "
            "run, so the run ended (or was stopped) before its first iteration; calibrate from "
            "a run that completed one, or from its trace if it was recorded"
        )
    if (path / "trace.jsonl").exists():
        return "holds a pxn trace, not a gepa run_dir: give it as a trace"
    return (
        f"holds no {RUN_LOG} (it holds {', '.join(entries[:3])}"
        + (", ..." if len(entries) > 3 else "")
        + f"): not a gepa run_dir; {GIVE_IT}"
    )


def _read_json(path: Path, what: str) -> Any:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) - 1
        problem = (
            f"is cut short at line {exc.lineno} (its JSON ends mid-value)"
            if cut
            else f"is not valid JSON (line {exc.lineno}: {exc.msg})"
        )
        raise PxnError(
            f"{problem}: gepa rewrites it whole each iteration, so this copy was taken while it "
            "was written or was damaged since; copy the run_dir again after the run has ended",
            subject=what,
        ) from None


def _run_log(path: Path) -> tuple[dict[str, Any], ...]:
    what = f"{path}"
    data = _read_json(path, what)
    if not (isinstance(data, list) and all(isinstance(e, dict) and "i" in e for e in data)):
        raise PxnError(
            "is not gepa's run log (a list of iterations, each with its number i)", subject=what
        )
    if not data:
        raise PxnError("lists no iteration: the run made none to calibrate from", subject=what)
    numbers = [e["i"] for e in data]
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        raise PxnError(
            "numbers its iterations out of order: not one run's log as gepa 0.1.4 writes it",
            subject=what,
        )
    return tuple(data)


def _candidates(path: Path) -> tuple[dict[str, str], ...]:
    if not path.is_file():
        return ()
    data = _read_json(path, f"{path}")
    if not (isinstance(data, list) and all(isinstance(c, dict) for c in data)):
        raise PxnError("is not gepa's list of candidate programs", subject=f"{path}")
    return tuple(data)


def _state(path: Path) -> tuple[GepaState | None, str]:
    if not path.is_file():
        return None, f"the directory holds no {STATE}"
    what = f"{path}"
    try:
        data = load_admitted(path.read_bytes(), what)
    except Refused as refused:
        return None, f"{STATE} {refused.problem}"
    if not isinstance(data, dict):
        raise PxnError("is not gepa's state (a pickled dict of its fields)", subject=what)
    schema = data.get("validation_schema_version")
    if schema != STATE_SCHEMA:
        raise PxnError(
            f"is gepa's state schema version {schema!r}; pxn reads version {STATE_SCHEMA}, "
            "what gepa 0.1.4 writes: calibrate runs made with gepa 0.1.4 (dspy 3.4.1), or "
            f"move {STATE} aside to calibrate from the JSON files alone",
            subject=what,
        )
    try:
        scores = tuple(dict(s) for s in data["prog_candidate_val_subscores"])
        parents = tuple(tuple(p) for p in data["parent_program_for_candidate"])
        state = GepaState(
            val_scores=tuple({k: float(v) for k, v in s.items()} for s in scores),
            parents=parents,
            metric_calls=int(data["total_num_evals"]),
            iterations=int(data["i"]) + 1,
            trace_length=len(data["full_program_trace"]),
            dspy="rng_state" in (data.get("adapter_state") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PxnError(
            f"lacks a field gepa 0.1.4's state has ({type(exc).__name__}: {exc})", subject=what
        ) from None
    return state, ""


def _check_agreement(
    path: Path,
    run_log: tuple[dict[str, Any], ...],
    candidates: tuple[dict[str, str], ...],
    state: GepaState | None,
) -> None:
    """The files of one save agree; gepa writes the state first, so a state ahead of the JSON
    files is a save caught half done."""
    what = f"run_dir {path}"
    counts = {}
    if candidates:
        counts[CANDIDATES] = len(candidates)
    if state is not None:
        counts[STATE] = len(state.val_scores)
        if state.trace_length != len(run_log):
            raise PxnError(
                f"has {state.trace_length} iterations in {STATE} and {len(run_log)} in {RUN_LOG}: "
                "a save caught half done (the run is still going, or stopped mid-save); "
                "calibrate once the run has ended",
                subject=what,
            )
    found = 1 + sum(len(e.get("new_program_indices", ())) for e in run_log)
    counts[RUN_LOG] = found
    if len(set(counts.values())) > 1:
        said = ", ".join(f"{n} in {name}" for name, n in counts.items())
        raise PxnError(
            f"disagrees on how many candidates the run found ({said}): a save caught half "
            "done, or files from different runs; calibrate once the run has ended",
            subject=what,
        )
