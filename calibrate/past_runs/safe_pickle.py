"""gepa_state.bin read without running what it names: a pickle is code.

Unpickling calls whatever the file names, so gepa's own `GEPAState.load` on someone
else's state can take over the machine. This reader resolves a name only when it is one
of ADMITTED (Python's containers and numbers, numpy's scalars, and gepa 0.1.4's two
evaluation-cache dataclasses); anything else, and any persistent id, is refused before
anything is called (`Refused`, one line naming it). What it admits runs no code of the file's
choosing: numpy scalars are built from dtype and bytes, gepa's dataclasses by
`object.__new__` and their `__dict__`.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from pxn.errors import PxnError

# (module, name) pairs a gepa 0.1.4 state may name, and nothing else.
ADMITTED: frozenset[tuple[str, str]] = frozenset(
    {
        # Containers and numbers older pickle protocols name instead of using opcodes.
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "dict"),
        ("builtins", "list"),
        ("builtins", "tuple"),
        ("builtins", "int"),
        ("builtins", "float"),
        ("builtins", "str"),
        ("builtins", "bytes"),
        ("builtins", "bool"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        # A numpy float or int a metric returned: a dtype and raw bytes.
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        # The evaluation cache (cache_evaluation=True) and its entries.
        ("gepa.core.state", "EvaluationCache"),
        ("gepa.core.state", "CachedEvaluation"),
    }
)


class Refused(PxnError):
    """The pickle names what no gepa 0.1.4 state holds: left unread."""


class _AdmittingUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BufferedIOBase, what: str):
        super().__init__(file)
        self.what = what

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ADMITTED:
            raise Refused(
                f"names {module}.{name}, which no gepa 0.1.4 state holds: refused unread (a "
                "pickle runs what it names)",
                subject=self.what,
            )
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise Refused(
            "holds a persistent id, which no gepa 0.1.4 state has: refused unread",
            subject=self.what,
        )


def load_admitted(data: bytes, what: str) -> Any:
    """The object a pickle holds, built only from ADMITTED globals; Refused naming the first
    other global it names (nothing it names is called), PxnError when it is cut short."""
    try:
        return _AdmittingUnpickler(io.BytesIO(data), what).load()
    except PxnError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as exc:
        raise PxnError(
            f"is not a whole pickle ({type(exc).__name__}: {exc}): cut short while it was "
            "being written, or not gepa's state",
            subject=what,
        ) from None
