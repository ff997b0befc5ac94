"""Outputs appear whole or not at all, with the permissions any other tool would give them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's file-creation mask (reading it means setting it, so it is set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomically(path: str | Path, text: str) -> Path:
    """Write to a temporary file beside `path`, then rename it into place.

    The temporary file is private (mode 0600) while it is written; the file
    put in place is readable as the umask allows, like one `open` created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            os.fchmod(file.fileno(), 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
