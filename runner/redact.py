"""Keep secrets out of every trace line, result file, log and error message.

An LM error can echo the request (headers included) or the key itself; every
string the runner writes from an exception goes through `redact` first.
"""

from __future__ import annotations

import os
import re

# Bearer tokens, "sk-..." style keys, and api_key=... / "api_key": "..." pairs.
_PATTERNS = [
    re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(bearer\s+)?[^\s\"',}]+"),
    re.compile(r"(?i)bearer\s+[A-Za-z0-9._\-]+"),
    re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
]
_SECRET_ENV = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|AUTH)")
MAX_LEN = 300  # an error message in the trace is a diagnosis, not a dump


def redact(text: str) -> str:
    # Values of environment variables that look like credentials, read fresh each time so
    # a key set after import is still caught.
    for key, value in list(os.environ.items()):
        if _SECRET_ENV.search(key) and len(value) >= 6:
            text = text.replace(value, "[REDACTED]")
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.lastindex else "") + "[REDACTED]", text)
    return text


def describe_error(exc: BaseException) -> str:
    """One redacted line: the exception's type and the start of its message."""
    message = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    line = redact(line)
    return line if len(line) <= MAX_LEN else line[: MAX_LEN - 3] + "..."
