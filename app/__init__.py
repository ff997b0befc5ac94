"""The app layer: the `pxn` command, and everything a person reads.

Tables, reports, figures and the Chrome export live here, above the core
(pxn), the simulator (pxn.sim), the runner (pxn.runner) and calibration
(pxn.calibrate); nothing below imports this package.
"""
