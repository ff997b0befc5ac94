"""gepa's own log lines: why a task made no proposal, the validation scores, and, in DSPy's
form, when things happened.

gepa.optimize given a run_dir and no logger writes its lines to run_log.txt, untimed;
dspy.GEPA sends them through Python's logging in DSPy's format, timed to the second.
Both carry "Iteration N: ..." (from 1; 0 for the seed). Read from them: per iteration,
the tasks that made no proposal and why, in task order (BEFORE_REFLECTION,
AT_REFLECTION; "Per-task reflection failed" names no iteration and belongs to the last
one named) and an iteration that ended in an exception; DSPy's budget line; and, with
DSPy's times, when each line was written (timing.py, stage_times.py).

The validation scores: gepa 0.1.4 logs the seed's mean alone ("Base program full valset
score: M over C / V examples"), and for each program that joins the pool (a proposal or a
merge, one block each, in the order they join) its scores by validation id ("Individual
valset scores for new program: {...}"), the block ending with its index in the pool ("New
program candidate index: N"). gepa appends to run_log.txt: a resumed run logs the seed's
line again at the last iteration its saved state had finished (kept: the line at iteration
0), a run started afresh in the same run_dir at iteration 0 (kept: the last such line), and
a program's block logged again (an iteration redone, a run started afresh) replaces the
earlier one. Either way the iterations after that seed line are run again, so why their
tasks made no proposal, and whether they failed, is the later run's alone.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from pxn.errors import PxnError

# A progress bar may stand before a line on the same row: the time is looked for anywhere.
DSPY_LINE = re.compile(r"(\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}) [A-Z]+ ([\w.-]+): (.*)$")
GEPA_LOGGER = "dspy.teleprompt.gepa"  # dspy.GEPA's logger: gepa's lines, under DSPy's name
DSPY_TIME = "%Y/%m/%d %H:%M:%S"
ITERATION = re.compile(r"Iteration (\d+): (.*)$")
BUDGET = re.compile(r"Running GEPA for approx (\d+) metric calls")
# Why a task made no proposal, by the line gepa logs (trace.NoProposal's reasons).
BEFORE_REFLECTION = {
    "All subsample scores perfect": "perfect_parent",
    "No trajectories for parent": "no_trajectories",
    "Exception building reflective dataset": "reflective_dataset",
}
AT_REFLECTION = {
    "Per-task reflection failed": "reflection_failed",
    "Reflection returned no text updates": "no_texts",
}
ITERATION_FAILED = "Exception during optimization"
# The validation scores (gepa/core/engine.py, gepa/logging/utils.py).
SEED_SCORE = re.compile(r"Base program full valset score: (\S+) over (\d+) / (\d+) examples")
NEW_SCORES = "Individual valset scores for new program: "
NEW_INDEX = re.compile(r"New program candidate index: (\d+)")
# A numpy scalar in a logged dict (a metric's np.float64, a loader's np.int64), as numpy 2
# prints it: its number.
NUMPY_SCALAR = re.compile(r"\b(?:np|numpy)\.\w+\(([^()]*)\)")


class SeedScore(NamedTuple):
    """The seed's validation as gepa logs it: its mean alone."""

    mean: float
    examples: int  # the examples it was scored on
    valset_size: int


class NewScores(NamedTuple):
    """A program that joined the pool, as gepa logs it."""

    iteration: int
    scores: dict[Any, float]  # validation id -> score


@dataclass(frozen=True)
class LogLine:
    time: datetime | None  # None in gepa's own run_log.txt, which has no times
    iteration: int | None  # the iteration the line belongs to (the last one named before it)
    text: str  # the message, "Iteration N: " taken off


@dataclass
class GepaLog:
    """What gepa's log lines say of a run."""

    lines: list[LogLine]
    # Per iteration: the reasons its tasks made no proposal, those before a reflection first
    # (in task order), then those at the reflection.
    before_reflection: dict[int, list[str]] = field(default_factory=dict)
    at_reflection: dict[int, list[str]] = field(default_factory=dict)
    failed_iterations: set[int] = field(default_factory=set)
    budget: int | None = None  # DSPy's "approx N metric calls": max_metric_calls
    source: str = ""
    seed_score: SeedScore | None = None
    new_scores: dict[int, NewScores] = field(default_factory=dict)  # by index in the pool

    @property
    def timed(self) -> bool:
        return any(line.time is not None for line in self.lines)

    def reasons(self, iteration: int) -> list[str]:
        return [*self.before_reflection.get(iteration, []), *self.at_reflection.get(iteration, [])]

    def run_again_after(self, iteration: int) -> None:
        """Forget the reasons and failures logged after `iteration`: a later run redoes them."""
        for table in (self.before_reflection, self.at_reflection):
            for redone in [i for i in table if i > iteration]:
                del table[redone]
        self.failed_iterations = {i for i in self.failed_iterations if i <= iteration}


def parse_log(lines: list[str] | tuple[str, ...], source: str) -> GepaLog:
    """gepa's lines among `lines` (others, such as a progress bar or DSPy's warnings, are
    passed over)."""
    log = GepaLog([], source=source)
    current: int | None = None
    pending: dict[Any, float] | None = None  # a new program's scores, before its index
    for raw in lines:
        time, logger, text = _split_time(raw)
        if logger is not None and not logger.startswith(GEPA_LOGGER):
            continue  # DSPy's own lines (its LM's warnings, its evaluator's errors)
        if (found := BUDGET.search(text)) is not None:
            log.budget = int(found.group(1))
        numbered = ITERATION.search(text)
        if numbered is not None:
            current = int(numbered.group(1))
            text = numbered.group(2)
        elif time is None and not any(text.startswith(start) for start in AT_REFLECTION):
            continue  # neither gepa's nor DSPy's line
        log.lines.append(LogLine(time, current, text))
        if current is None:
            continue
        for table, reasons in (
            (BEFORE_REFLECTION, log.before_reflection),
            (AT_REFLECTION, log.at_reflection),
        ):
            for start, reason in table.items():
                if text.startswith(start):
                    reasons.setdefault(current, []).append(reason)
        if text.startswith(ITERATION_FAILED):
            log.failed_iterations.add(current)
        if (seed := SEED_SCORE.match(text)) is not None:
            log.run_again_after(current)
            if log.seed_score is None or current == 0:
                log.seed_score = _seed_score(seed)
        elif text.startswith(NEW_SCORES):
            pending = _scores(text.removeprefix(NEW_SCORES))
        elif (index := NEW_INDEX.match(text)) is not None and pending is not None:
            log.new_scores[int(index.group(1))] = NewScores(current, pending)
            pending = None
    return log


def _seed_score(found: re.Match[str]) -> SeedScore | None:
    try:
        mean = float(found.group(1))
    except ValueError:
        return None
    return SeedScore(mean, int(found.group(2)), int(found.group(3)))


def _scores(text: str) -> dict[Any, float] | None:
    """A logged dict of scores by validation id; None when it cannot be read as one (it is
    read as a literal: nothing in it is run)."""
    try:
        value = ast.literal_eval(NUMPY_SCALAR.sub(r"\1", text.strip()))
        if not isinstance(value, dict) or not value:
            return None
        return {key: float(score) for key, score in value.items()}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def read_log_file(path: str | Path) -> GepaLog:
    """A saved log (DSPy's output kept in a file); PxnError when it holds no gepa line."""
    path = Path(path)
    what = f"log {path}"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PxnError(f"cannot be read: {exc.strerror}", subject=what) from None
    # A progress bar rewrites its line with carriage returns, and DSPy's lines follow it.
    log = parse_log(re.split(r"[\r\n]+", text), str(path))
    if not any(line.iteration is not None for line in log.lines):
        raise PxnError(
            'holds no line of gepa\'s log ("Iteration N: ..."): give the output dspy.GEPA '
            "printed (its log lines carry their times), or leave it out",
            subject=what,
        )
    return log


def _split_time(raw: str) -> tuple[datetime | None, str | None, str]:
    """(time, logger, message) of a DSPy line; (None, None, the line) of gepa's own."""
    found = DSPY_LINE.search(raw.strip())
    if found is None:
        return None, None, raw.strip()
    return datetime.strptime(found.group(1), DSPY_TIME), found.group(2), found.group(3)
