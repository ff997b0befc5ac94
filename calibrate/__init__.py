"""Calibration: traces, run summaries or past runs into a Scenario, and whether it reproduces
its own runs."""
