"""The Python API: `simulate`, `sweep`, `advise`, `calibrate`, `validate`, `conformance` and
`run`, as the `pxn` command runs them.

    from pxn.api import sweep
    result = sweep("hover", shapes="single,2x2,4x4", reps=40)
    result.to_frame()   # one row per shape (needs pandas)
    result.figure()     # the figure `pxn sweep --out` saves
    result              # in a notebook: the table `pxn sweep` prints

Each function takes a scenario (a Scenario, a preset's name or a TOML path;
calibrate takes traces or a summaries file) and the options of its command,
with the same defaults, and returns a frozen result the command itself
prints: one code path for both. Bad input raises PxnError, in the domain's
words. This package sits between the command (pxn.app) and the libraries
(pxn.sim, pxn.runner, pxn.calibrate, pxn.checks); only pxn.app imports it. It is
pxn.api, not pxn itself, because pxn.calibrate already names a package.
See docs/api.md.
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
