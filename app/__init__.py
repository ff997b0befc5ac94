"""The app layer: the `pxn` command.

It parses flags, calls the Python API (pxn.api) or a library, and prints or
writes the result; nothing below imports this package.
"""
