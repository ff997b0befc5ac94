"""Record `dspy.GEPA(...).compile(...)` into a pxn trace with one line: the stable public
entry point (`recorded(dspy.GEPA(...), "runs/my-run")`; docs/recording.md).
"""

from pxn.runner.recording.dspy_optimizer import RecordedGEPA, recorded

__all__ = ["RecordedGEPA", "recorded"]
