"""The machine a benchmark ran on and how loaded it was, for its printout."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def machine() -> str:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    # Which interpreter: builds of one version differ by ~20% (PGO and LTO or not).
    python = f"Python {platform.python_version()} ({Path(sys.executable).resolve()})"
    return f"{os.cpu_count()} CPUs ({cpu}), {python}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"
