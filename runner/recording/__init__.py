"""The recorder of real gepa and dspy.GEPA runs, by part (pxn.runner.record is its entry)."""
