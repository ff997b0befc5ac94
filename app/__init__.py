"""The `pxn` command."""
