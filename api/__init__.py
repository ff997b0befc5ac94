"""The Python API, between the `pxn` command (pxn.app) and the libraries.

Results as a person reads them live here: tables, reports, figures and the
progress shown on stderr, so a notebook and the CLI print the same thing.
Only pxn.app imports this package.
"""
