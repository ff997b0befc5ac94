"""The Python API: the `pxn` commands as functions returning results the command
itself prints (one code path for both). See docs/api.md.

    from pxn.api import sweep
    result = sweep("hover", shapes="single,2x2,4x4", reps=40)
    result.to_frame()   # the CSV's rows (needs pandas)
    result.figure()     # the figure `pxn sweep --out` saves

It is pxn.api, not pxn itself, because pxn.calibrate already names a package.
"""

from pxn.api.advice import AdviseResult, advise
from pxn.api.calibration import CalibrateResult, calibrate
from pxn.api.checks import ConformanceResult, ValidateResult, conformance, validate
from pxn.api.predictions import SimulateResult, SweepResult, simulate, sweep
from pxn.api.runs import run

__all__ = [
    "AdviseResult",
    "CalibrateResult",
    "ConformanceResult",
    "SimulateResult",
    "SweepResult",
    "ValidateResult",
    "advise",
    "calibrate",
    "conformance",
    "run",
    "simulate",
    "sweep",
    "validate",
]
