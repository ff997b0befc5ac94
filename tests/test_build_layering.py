"""The import rules of the design, by folder: imports point inward.

    app -> api -> checks -> {sim, runner, calibrate} -> pxn (the core)

The core (pxn/) imports none of the others; sim imports neither runner nor
calibrate; runner imports neither sim nor calibrate; calibrate may import sim
(to predict) but not runner; checks (the simulator against real runs) imports
those three but neither api nor app; api (the Python API) imports all of those but
not app; nothing but app imports api, and nothing imports app. Imports inside functions
count: a lazy import is still a dependency. A folder added later is checked
too: every folder that holds a package must appear in LAYERS.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
APP, API = "pxn.app", "pxn.api"
SIM, RUNNER, CALIBRATE, CHECKS = "pxn.sim", "pxn.runner", "pxn.calibrate", "pxn.checks"
# folder -> the packages its modules must not import
LAYERS = {
    "pxn": {APP, API, SIM, RUNNER, CALIBRATE, CHECKS},
    "sim": {APP, API, RUNNER, CALIBRATE, CHECKS},
    "runner": {APP, API, SIM, CALIBRATE, CHECKS},
    "calibrate": {APP, API, RUNNER, CHECKS},
    "checks": {APP, API},
    "api": {APP},
    "app": set(),
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


def test_every_package_folder_has_a_layer() -> None:
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    top_folders = {folder.split("/")[0] for folder in package_dir.values()}
    assert top_folders == set(LAYERS)


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_folder_imports_point_inward(folder: str) -> None:
    sources = sorted((ROOT / folder).rglob("*.py"))
    assert sources, f"no sources under {folder}/"
    wrong = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sources
        for module in imported_modules(path)
        if breaks(module, LAYERS[folder])
    }
    assert not wrong, sorted(wrong)
