"""What a past run's calibration read, measured, inferred and assumed, line by line.

The lines come before the inference's own report (api/calibration_report.py):
which files were read and how, the setup and where each figure of it came
from, the run's measured figures, where its time came from and how far it
is trusted, what was assumed, and how much a recorded run would narrow the
latencies: a recording times each of the run's calls, so its medians are
known to the spread of that many draws, where here they are known only as
far as the wall-clock pins them.
"""

from __future__ import annotations

import math
import textwrap

from pxn.calibrate.past_runs.calibration import PastCalibration
from pxn.calibrate.past_runs.run_dir import CANDIDATES, RUN_LOG, STATE
from pxn.calibrate.traces.fit import LatencyFit
from pxn.durations import format_duration
from pxn.run_summary import summarize

Z90 = 1.645  # a normal's 5-95% reaches this many sds either side
WIDTH = 100  # columns, as every report keeps to


def wrapped(lines: list[str]) -> list[str]:
    """Each line within WIDTH, its continuation indented one step past its own indent."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ") or [""]
    return out


def past_run_lines(cal: PastCalibration) -> list[str]:
    run, setup = cal.run, cal.setup
    summary = summarize(cal.trace)
    tasks = sum(len(r.tasks) for r in run.iterations)
    read = [
        f"  {RUN_LOG}: {len(run.iterations)} iterations, {tasks} tasks, {summary.proposals} "
        "proposals judged with their minibatch scores",
        f"  {CANDIDATES}: {1 + summary.accepted + summary.merges_accepted} programs, "
        f"{run.components} component(s) each",
    ]
    read += _scores_lines(cal)
    lost = summary.failed + summary.skipped
    lines = [
        f"calibrated from a past run: {run.path} (as gepa wrote it; no recorder)",
        "read:",
        *read,
        f"setup: shape {run.shape} ({run.shape_note}); V={len(run.valset)} (the seed's "
        f"validation); train={run.trainset_size} (the largest training id seen, plus one); "
        f"b={run.minibatch}",
        *(f"  {said}" for said in setup.said),
        "measured (read off the files): "
        f"{summary.iterations} iterations, {summary.proposals} proposals, "
        f"{summary.accepted} accepted, {summary.full_val_iterations} full validations, "
        f"{run.metric_calls} metric calls ({run.metric_calls_note}), {lost} tasks without a "
        "proposal"
        + (
            f", seed score {summary.seed_score:.3f}, best {summary.best_score:.3f}"
            if summary.seed_score is not None and summary.best_score is not None
            else ""
        ),
    ]
    if run.reasons_guessed:
        lines.append(
            f"  {run.reasons_guessed} of those tasks left no reason (no gepa log was read): "
            "read as skipped where their parent's known minibatch scores were perfect, else as "
            "lost before a reflection"
        )
    lines += _time_lines(cal)
    lines += [
        "assumed: lognormal latencies, one for every rollout phase; no engine overhead, no "
        "load slowdown, no prefix cache (a trace without durations shows none of them); "
        "runs' speeds differing by the run spread's prior (one run cannot show how much)",
        *_narrowing_lines(cal, summary.proposals),
        *(f"note: {note}" for note in cal.notes),
        "",
    ]
    return wrapped(lines)


def _scores_lines(cal: PastCalibration) -> list[str]:
    """Where the validation scores were read (the state, else gepa's log lines), what they
    lack, and the log's other use."""
    run = cal.run
    scores, log = run.val_scores, run.log
    valset = f"{len(run.valset)} validation examples"
    why = "why tasks made no proposal"
    if scores is not None and scores.from_log:
        missing = "the seed's score on each validation example (gepa 0.1.4 logs its mean alone)"
        if cal.search == "quality":
            missing += (
                ": the examples' spread is not a fact of the inference, and the scenario keeps "
                "no seed_validation (its runs draw the seed's scores on the examples)"
            )
        return [
            f"  {scores.source}: every new program's scores on the {valset} and the seed's "
            f"mean (gepa's log lines; {run.val_note}), and {why}",
            f"  missing: {missing}",
        ]
    lines = [
        f"  no validation scores: {run.val_note}"
        if scores is None
        else f"  {STATE}: every candidate's score on the {valset} (read through pxn's admitting "
        "unpickler: containers, numbers and gepa's own types only)"
    ]
    return lines + ([] if log is None else [f"  {log.source}: gepa's log lines, for {why}"])


def _time_lines(cal: PastCalibration) -> list[str]:
    clock = cal.wall_clock
    lines = [f"time: wall-clock {clock.said} ({clock.source})"]
    times = cal.file_times
    if times is not None and "files' times" not in clock.source:
        lines.append(f"  the files' own times: {'trusted' if times.trusted else 'not used'}: "
                     f"{times.why}")  # fmt: skip
    if cal.stages is not None:
        spans = (
            f"{len(cal.stages.spans)} rollout stages' spans as makespans on W={cal.setup.workers}"
        )
        kind = "the seed's rollout" if cal.stages.candidates.chosen else "rollout"
        lines.append(_measured(cal.stages.source, spans, kind, cal.stages.latency))
        lines.append(f"    {cal.stages.candidates.reason}")
    if cal.reflections is not None:
        reflections = cal.reflections
        lines.append(
            _measured(reflections.source, reflections.spans, "reflection", reflections.latency)
        )
    if cal.stages is None and cal.reflections is None:
        if cal.tracked is not None:
            lines.append("  MLflow's stage times marked too few stages to time the rollouts")
        lines.append(
            "  inferred: the rollout and reflection latencies, from the wall-clock and the "
            "run's structure, by simulation (below)"
        )
    else:
        lines.append(
            "  inferred from the wall-clock by simulation (below), the measured latency's "
            "priors narrowed to what was measured: the rest"
        )
    return lines


def _measured(source: str, spans: str, kind: str, fit: LatencyFit) -> str:
    low, high = fit.median_ci
    median = fit.chosen.params["scale"]
    return (
        f"  measured by {source}: {spans}: {kind} median {median:.3g} s [95% {low:.3g}, {high:.3g}]"
    )


def _narrowing_lines(cal: PastCalibration, proposals: int) -> list[str]:
    """How wide the latencies' medians are here, against what a recording of this run would
    leave them: its n latencies' median known to about z * 1.25 s / sqrt(n) on the log
    scale either side (the median's standard error), at the posterior's own s; both 5-95%."""
    counts = {"rollout": cal.run.metric_calls, "reflection": max(proposals, 1)}
    posterior = {p.path: p for p in cal.inference.parameters}
    lines = []
    for kind, n in counts.items():
        scale, spread = posterior.get(f"{kind}.scale"), posterior.get(f"{kind}.s")
        if scale is None or spread is None:
            continue
        here = scale.high / scale.low
        recorded = math.exp(2 * Z90 * 1.25 * spread.median / math.sqrt(n))
        span = f"{_seconds(scale.low)} to {_seconds(scale.high)}"
        if here > recorded:
            lines.append(
                f"a recorded run would narrow: the {kind} median here lies in {span} (5-95%, "
                f"x{here:.3g}); timing this run's {n} {kind}s would pin it to about "
                f"x{recorded:.2f}"
            )
        else:
            lines.append(
                f"the {kind} median here lies in {span} (5-95%, x{here:.3g}): about as narrow "
                f"as timing this run's {n} {kind}s would make it"
            )
    return lines


def _seconds(value: float) -> str:
    return format_duration(value) if value >= 1 else f"{value:.3g} s"
