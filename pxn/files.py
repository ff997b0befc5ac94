"""Outputs appear whole or not at all, with the permissions any other tool would give them.

A path the system will not write (no room, a read-only file system) is a PxnError
naming it, and the file it would have replaced is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pxn.errors import PxnError


def umask() -> int:
    """The process's file-creation mask (reading it means setting it, so it is set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomically(path: str | Path, text: str) -> Path:
    """Write to a private temporary file beside `path`, then rename it into place, readable
    as the umask allows."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise cannot_write(path, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            os.fchmod(file.fileno(), 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise cannot_write(path, exc) from None
        raise
    return path


def cannot_write(path: Path, error: OSError) -> PxnError:
    reason = (error.strerror or type(error).__name__).lower()
    return PxnError(f"cannot write {path}: {reason}")
