"""Runs already made, without pxn's recorder: gepa's run_dir, dspy.GEPA's log_dir, MLflow."""
