"""Record `dspy.GEPA(...).compile(...)` into a pxn trace with one line: the stable public
entry point.

    from pxn.runner.dspy_recording import recorded

    optimizer = recorded(dspy.GEPA(metric=..., max_metric_calls=..., reflection_lm=...,
                                   num_threads=4), "runs/my-run")
    program = optimizer.compile(student, trainset=trainset, valset=valset)

Import these names from here: they stay here while the recorder's parts
(pxn.runner.recording) move. What is recorded and how: docs/recording.md.
"""

from pxn.runner.recording.dspy_optimizer import RecordedGEPA, recorded

__all__ = ["RecordedGEPA", "recorded"]
