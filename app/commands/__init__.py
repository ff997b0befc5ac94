"""The commands of `pxn`: `pxn X` is X.py, a group's subcommands in its module."""
