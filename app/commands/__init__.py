"""The commands of `pxn`, one module per command or group, named after it: `pxn X` is in
X.py (simulate, sweep, advise, presets, calibrate, validate, run, tasks, conformance), and
a group's subcommands in the group's module (plot, trace, lm).

A command parses its flags, calls the Python API (pxn.api) or a library, and prints or
writes the result; the flags several commands share are in app/options.py.
"""
