"""The releases the recorder reads: another version is refused before anything runs.

The recorder relies on how gepa 0.1.4 (and dspy.GEPA of DSPy 3.4.1) call their
parts and callbacks, so a run on another release is refused in one line
naming the release to install.
"""

from __future__ import annotations

import importlib.metadata

from pxn.errors import PxnError

SUPPORTED_GEPA = "0.1.4"
SUPPORTED_DSPY = "3.4.1"


def require_release(dist: str, supported: str, what: str, install: str) -> str:
    """The installed `dist` must be the release whose code pxn reads to record `what`
    ("gepa", "dspy.GEPA of dspy")."""
    version = importlib.metadata.version(dist)
    if version != supported:
        raise PxnError(
            f"is {version}; pxn records {what} {supported} only (pip install {install})",
            subject=f"{dist} version",
        )
    return version


def check_gepa() -> str:
    return require_release("gepa", SUPPORTED_GEPA, "gepa", f"gepa=={SUPPORTED_GEPA}")


def check_dspy() -> None:
    require_release("dspy", SUPPORTED_DSPY, "dspy.GEPA of dspy", "'gepa-pxn[dspy]'")
