"""Record any `gepa.optimize` or `optimize_anything` run into a pxn trace: the stable public
entry point.

    import gepa
    from pxn.runner.record import recording

    with recording("runs/my-run") as rec:
        result = gepa.optimize(**rec.wrap(seed_candidate=..., trainset=..., valset=...,
                                          adapter=..., reflection_lm=..., max_metric_calls=...))

    from gepa.optimize_anything import optimize_anything

    with recording("runs/my-oa-run") as rec:
        result = optimize_anything(**rec.wrap(seed_candidate=..., evaluator=..., dataset=...,
                                              valset=..., config=GEPAConfig(...)))

`rec.wrap` takes exactly the keyword arguments you would pass to either
function and returns them with the adapter (gepa's default one built from
`task_lm` when you pass none; optimize_anything's own, reached when gepa
builds it), the reflection LM, the selection strategy, the callbacks and
the stoppers wrapped (yours keep working); every wrapper calls your code on
the caller's thread, so nothing of the run is made serial or parallel.
runs/my-run/trace.jsonl (the schema of pxn.trace) is written event by event;
leaving the `with` block, by return, exception or Ctrl-C, writes `run_end`
with gepa's own totals checked against the trace (`rec.result`). An adapter
or LM that times its own calls reports them (`RolloutReport`, `rec.rollout`,
`ReflectionReport`). `pxn run` records its built-in tasks through this same
code.

Rules: gepa 0.1.4 only (another version is refused before anything runs); a
directory that already holds a trace is refused unless `resume=True` or
`overwrite=True`. No argument's value is written to the trace except sizes,
the shape, the budget, the seed and the names of the parts.

Import these names from here: they stay here while the recorder's parts
(pxn.runner.recording) change. What is recorded, and how well:
docs/recording.md.
"""

from pxn.runner.recording.api import Recording, recording
from pxn.runner.recording.reports import ReflectionReport, RolloutNote, RolloutReport
from pxn.runner.recording.run_directory import RunFinished, check_resumable
from pxn.runner.recording.totals import RecordedRun, completed_run

__all__ = [
    "RecordedRun",
    "Recording",
    "ReflectionReport",
    "RolloutNote",
    "RolloutReport",
    "RunFinished",
    "check_resumable",
    "completed_run",
    "recording",
]
