"""Runs already made, without pxn's recorder: gepa's run_dir, dspy.GEPA's log_dir, MLflow.
calibration.py runs it all; report.py says what was measured, inferred and assumed.
"""
