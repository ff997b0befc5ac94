"""Calibration: real traces -> Scenario; predicted against measured."""
