"""Runs already made, without pxn's recorder: gepa's run_dir, dspy.GEPA's log_dir, MLflow.

run_dir.py reads the directory's files (safe_pickle.py its pickle), past_run.py tells the
run from them (gepa_log.py: why tasks made no proposal), to_trace.py makes it a trace of
the one schema without durations; file_times.py, mlflow_run.py and timing.py find its
wall-clock, stage_times.py the latencies its marked stages measure; inference.py infers
the rest by simulation, calibration.py runs it all, report.py says what was measured,
inferred and assumed.
"""
