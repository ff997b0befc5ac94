"""A past run's search and latencies inferred together, by simulation, from its figures.

The trace made from the run (to_trace.py) holds its scores and verdicts but
no durations, so its latencies cannot be fitted; what it has is the run's
figures and its wall-clock (timing.py). These are facts of the kind run
summaries give, and the summaries' inference (pxn.calibrate.summaries, the
simulator as its likelihood) reads them as `pxn calibrate --summaries` does:

- the search's figures as calibrate/traces/quality.py reads them off any
  trace (the seed's and best validation score, acceptance, skips, a new
  candidate's validation gain over its parent, how much examples differ,
  how often a repeated evaluation agrees), with the quality model's priors,
  where the run's validation scores are known (gepa_state.bin); without
  them, acceptance rates, from the iterations and accepted proposals;
- the iterations and the full validations, as counted;
- the wall-clock, a value or a range, with the rollout's and the
  reflection's lognormal latencies left to their priors (or to narrower
  ones, where the run's stage times measured them).

With the time known only as a total, the split between rollouts and
reflections is what the priors and the run's structure leave it: the
posterior's draws carry that, and every prediction's interval with them.
The proposals the run lost before gepa judged them are held at the shares
its trace shows, as calibrate/traces/quality.py holds them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pxn.calibrate.past_runs.timing import WallClock
from pxn.calibrate.summaries.facts import Fact, InferenceOptions, Run, Setup, Summaries
from pxn.calibrate.summaries.priors import Prior
from pxn.calibrate.traces.quality import FIXED_TIMES, trace_summaries
from pxn.failures import Failures
from pxn.run_summary import summarize
from pxn.shape import Shape
from pxn.trace_reading import Trace

PARTICLES = 200
MAX_GENERATIONS = 12


def past_run_summaries(
    trace: Trace,
    wall_clock: WallClock,
    *,
    scored: bool,
    failures: Failures,
    options: InferenceOptions,
    priors: dict[str, Prior] | None = None,
    path: Path | None = None,
) -> Summaries:
    """The run's figures as facts of one run at its own setup and shape."""
    summary = summarize(trace)
    if scored:
        base = trace_summaries([trace], options, failures)
        # Labelled by the run's directory, not the temporary one its trace was read from.
        temporary = trace.path.parent.name or trace.path.name
        runs = base.runs
        facts = [
            dataclasses.replace(f, label=f.label.removeprefix(f"{temporary} ")) for f in base.facts
        ]
        fixed = {p: v for p, v in base.priors.items() if p not in FIXED_TIMES}
    else:
        start = trace.run_start
        runs = (Run(Shape.parse(start.shape), Setup.of_trace(start)),)
        facts = [_count("accepted", summary.accepted)]
        fixed = {f"failures.{k}": v for k, v in failures.to_dict().items()} if failures.any else {}
    facts += [
        _count("iterations", summary.iterations),
        _count("full_val_iterations", summary.full_val_iterations),
        Fact(
            label="wall clock",
            quantity="wall_clock",
            low=wall_clock.low,
            high=wall_clock.high,
            runs=(0,),
            reported=wall_clock.said.removeprefix("about "),
            unit="min",
            per_unit=60.0,
            precision=wall_clock.precision,
        ),
    ]
    return Summaries(
        path or trace.path,
        tuple(runs),
        tuple(facts),
        {**fixed, **(priors or {})},
        options,
    )


def _count(quantity: str, value: int) -> Fact:
    return Fact(quantity.replace("_", " "), quantity, float(value), float(value), (0,), str(value))


def default_options(draws: int, seed: int = 0) -> InferenceOptions:
    return InferenceOptions(
        seed=seed, particles=PARTICLES, draws=max(draws, 1), max_generations=MAX_GENERATIONS
    )
