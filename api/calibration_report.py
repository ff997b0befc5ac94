"""The calibration as text: printed for a person, and as the Scenario's TOML header. Each
fitted part's lines are its module's (pxn.calibrate.traces); the quality model's are
inference_report.py's."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from pxn.api.inference_report import quality_lines
from pxn.calibrate.traces.acceptance import acceptance_lines
from pxn.calibrate.traces.bookkeeping import bookkeeping_lines, merge_lines
from pxn.calibrate.traces.draws import draws_lines
from pxn.calibrate.traces.failures import failure_lines
from pxn.calibrate.traces.fit import latency_lines
from pxn.calibrate.traces.makespan import rollout_lines
from pxn.calibrate.traces.overhead import concurrency_lines, load_effect_lines, overhead_lines
from pxn.calibrate.traces.phases import phase_lines
from pxn.calibrate.traces.pipeline import Calibration
from pxn.calibrate.traces.prefix_cache import prefix_cache_line
from pxn.calibrate.traces.prompt_lengths import prompt_line
from pxn.calibrate.traces.run_spread import run_spread_line
from pxn.calibrate.traces.tokens import token_lines, tokens_out_lines


def _digest(path: Path) -> str:
    """The start of the trace's SHA-256: which bytes this scenario came from."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "unreadable"


def calibration_lines(cal: Calibration) -> list[str]:
    lines = trace_lines(cal)
    lines.extend(setup_lines(cal))
    lines.extend(rollout_lines(cal))
    lines.extend(phase_lines(cal))
    lines.append(prompt_line(cal))
    lines.extend(latency_lines(cal.reflection))
    lines.extend(tokens_out_lines(cal))
    lines.extend(token_lines(cal))
    lines.extend(acceptance_lines(cal))
    lines.extend(quality_lines(cal))
    lines.append(cal.skip.line())
    lines.extend(failure_lines(cal))
    lines.extend(overhead_lines(cal))
    lines.extend(concurrency_lines(cal))
    lines.extend(load_effect_lines(cal))
    lines.extend(load_lines(cal))
    lines.extend(bookkeeping_lines(cal))
    lines.extend(merge_lines(cal))
    lines.extend(draws_lines(cal))
    lines.extend(f"note: {note}" for note in cal.notes)
    return lines


def trace_lines(cal: Calibration) -> list[str]:
    """The traces read (each with its digest), those set aside, and the lines skipped."""
    loaded = cal.loaded
    lines = [f"calibrated from {len(cal.traces)} trace(s):"]
    for trace in cal.traces:
        start = trace.run_start
        lines.append(
            f"  {trace.path} (sha256 {_digest(trace.path)}): {start.source}, shape "
            f"{start.shape}, W={start.workers}, "
            f"B={start.budget}, {len(trace.events)} events"
            + (f", {len(trace.skipped)} line(s) skipped" if trace.skipped else "")
        )
    for reason in loaded.rejected:
        lines.append(f"  set aside: {reason}")
    skipped = loaded.skipped_lines
    if skipped:
        lines.append(f"skipped {len(skipped)} unusable line(s):")
        lines.extend(f"  {line}" for line in skipped[:10])
        if len(skipped) > 10:
            lines.append(f"  ... and {len(skipped) - 10} more")
    return lines


def setup_lines(cal: Calibration) -> list[str]:
    """The runs' setup, and how long a run the traces saw ([calibrated_on])."""
    s = cal.scenario
    lines = [
        f"setup: B={s.budget}, V={s.valset_size}, train={s.trainset_size}, "
        f"b={s.minibatch}, W={s.workers}, C={s.reflection_concurrency}, "
        f"selection={s.selection}"
    ]
    seen = s.calibrated_on
    if seen is not None:
        lines.append(
            f"calibrated on: the longest of {seen.runs} run(s) made {seen.metric_calls} metric "
            f"calls and {seen.proposals} proposals ([calibrated_on]); a prediction for a longer "
            "run extrapolates, and its report says by how much"
        )
    return lines


def load_lines(cal: Calibration) -> list[str]:
    """The LM pool; each model's load slowdown and run spread; the reflections' prefix cache."""
    s = cal.scenario
    servers = cal.servers
    pool = (
        f"lm_servers={servers} ({cal.lm_servers_source})"
        if servers is not None
        else "lm_servers unknown (no limit; pass --lm-servers K for a local pool)"
    )
    lines = [f"LM pool: {pool}"]
    for role, model in cal.slowdowns.items():
        lines.extend(model.lines(role, s.loads.of(role).slowdown))
        lines.append(run_spread_line(cal.run_spreads[role]))
    if servers is not None:
        lines.append(
            f"  fitted only on calls that started with at most {servers} in flight: a later "
            "one may have waited for a server, and that wait is not a slowdown"
        )
    lines.append(prefix_cache_line(cal))
    return lines


def calibration_header(cal: Calibration, first: Sequence[str] = ()) -> str:
    """The scenario file's header: `first` (whether it reproduces its runs), then the report."""
    title = f"Calibrated scenario '{cal.scenario.name}', written by pxn calibrate."
    return "\n".join([title, "", *first, *calibration_lines(cal)])
