"""Traces -> a calibrated Scenario: each fitted part from its own small module, and the
pipeline that runs them in order (pipeline.py)."""
