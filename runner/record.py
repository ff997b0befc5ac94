"""Record any `gepa.optimize` or `optimize_anything` run into a pxn trace: the stable public
entry point.

    import gepa
    from pxn.runner.record import recording

    with recording("runs/my-run") as rec:
        result = gepa.optimize(**rec.wrap(seed_candidate=..., trainset=..., valset=...,
                                          adapter=..., reflection_lm=..., max_metric_calls=...))

`rec.wrap` takes exactly the keyword arguments you would pass to either
function and returns them with the parts wrapped; every wrapper calls your
code on the caller's thread, so nothing is made serial or parallel. The trace
is written event by event; leaving the block writes `run_end` with gepa's own
totals checked against the trace (`rec.result`). gepa 0.1.4 only; a used
directory is refused unless `resume=True` or `overwrite=True`; no argument's
value is written except sizes, shape, budget, seed and the parts' names.
What is recorded, and how well: docs/recording.md.
"""

from pxn.runner.recording.api import Recording, recording
from pxn.runner.recording.calls import ReflectionReport, RolloutNote, RolloutReport
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
