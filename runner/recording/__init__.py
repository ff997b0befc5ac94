"""The recorder of real gepa and dspy.GEPA runs, in small parts with one job each.

Users import pxn.runner.record (`recording`) and pxn.runner.dspy_recording
(`recorded`): those names stay put while these modules change.

    the public API
      api.py               `recording(...)`: the with-block around one gepa.optimize or
                           optimize_anything run
      arguments.py         its arguments and gepa.optimize's, checked before anything runs
      dspy_optimizer.py    `recorded(dspy.GEPA(...), out)`: the same recording, reached via DSPy
      reports.py           what the user's parts may report: RolloutReport, ReflectionReport
    what gepa does -> trace events
      callbacks.py         gepa's callbacks
      recorder.py          the wrapped parts' reports; composes the parts below
      bookkeeping.py       which task, proposal and pass each call belongs to
      labels.py            which candidate and example each rollout is
      stages.py, rollouts.py, reflections.py, decisions.py, merges.py
                           one kind of event each
      sink.py, slots.py    the trace shared by all parts; slot numbers
    the wrappers (each calls the user's object on the caller's thread)
      adapter_wrapper.py, lm_wrapper.py, selection_wrapper.py, metered_lm.py
    gepa's own adapters, reached and timed
      default_adapter.py   gepa.optimize's default adapter, built from task_lm as gepa builds it
      anything_arguments.py  optimize_anything's arguments: told apart, checked, read as
                           gepa.optimize's
      anything_config.py   the GEPAConfig holding the recorder's parts
      anything_adapter.py  optimize_anything's adapter, reached when gepa builds it; each
                           evaluator call timed
    the run's start and end
      versions.py          gepa 0.1.4 (and DSPy 3.4.1) or a clear refusal
      run_start.py         run_start from gepa.optimize's arguments
      resume.py            a finished run refused, a torn last line dropped
      stopper.py           ends a run whose reflections or adapter calls keep failing
      stop_reasons.py      which stopping condition ended a run
      scores.py            an adapter call's scores checked: one finite number per example
      totals.py            the trace's totals against gepa's own
    DSPy
      dspy_rollouts.py     DSPy's rollouts and proposals timed where DSPy runs them
      dspy_usage.py        their tokens and prompts
"""
