"""Record any `gepa.optimize` run into a pxn trace: the stable public entry point.

    import gepa
    from pxn.runner.record import recording

    with recording("runs/my-run") as rec:
        result = gepa.optimize(**rec.wrap(seed_candidate=..., trainset=..., valset=...,
                                          adapter=..., reflection_lm=..., max_metric_calls=...))

Import these names from here: they stay here while the recorder's parts
(pxn.runner.recording) move. What is recorded and how: docs/recording.md.
"""

from pxn.runner.recording.api import (
    RecordedRun,
    Recording,
    ReflectionReport,
    RolloutNote,
    RolloutReport,
    RunFinished,
    check_resumable,
    completed_run,
    recording,
)

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
