"""The recorder of real gepa and dspy.GEPA runs, one job a module (docs/development.md maps
them). Users import pxn.runner.record and pxn.runner.dspy_recording, which stay put while
these modules change."""
