"""The import rules of the design: imports point inward.

sim, runner and calibrate build on pxn's core (scenario, trace, errors, ...);
calibrate may import sim, to predict; runner imports neither sim nor
calibrate; sim imports neither runner nor calibrate; none of them imports the
CLI or the report layer, which sit outside all three. Imports inside
functions count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
OUTER = {"pxn.cli", "pxn.report", "pxn.plots", "pxn.advise_report", "pxn.validation_report"}
FORBIDDEN = {
    "sim": {"pxn.runner", "pxn.calibrate", *OUTER},
    "runner": {"pxn.sim", "pxn.calibrate", *OUTER},
    "calibrate": {"pxn.runner", *OUTER},
}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def breaks(module: str, forbidden: set[str]) -> bool:
    return any(module == f or module.startswith(f + ".") for f in forbidden)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_point_inward(package: str) -> None:
    sources = sorted((ROOT / package).rglob("*.py"))
    assert sources, f"no sources under {package}/"
    wrong = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sources
        for module in imported_modules(path)
        if breaks(module, FORBIDDEN[package])
    }
    assert not wrong, sorted(wrong)
