"""The wheel ships what an install needs: pxn.sim etc. mapped from sim/, presets included.

Builds the wheel from a copy of the source (so the shared working tree gets no
build/ or egg-info), installs it with --no-deps into a fresh venv, and imports
from that venv in a directory away from the sources, so nothing can come from
the editable install.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The files the build reads, and every folder setuptools maps a package from.
PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"
]
FOLDERS = sorted({folder.split("/")[0] for folder in PACKAGE_DIRS.values()})
SOURCES = ["pyproject.toml", "README.md", "LICENSE", *FOLDERS]


def run(*args: str | Path, cwd: Path) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_wheel_installs_and_imports_from_a_fresh_venv(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif path.exists():
            shutil.copy2(path, source / name)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, source, cwd=tmp_path)
    [wheel] = dist.glob("gepa_pxn-*.whl")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel,
        cwd=tmp_path)  # fmt: skip
    # The pinned dependencies come from this test's own environment, appended after
    # the new venv's site-packages: its .pth files (the editable install of pxn)
    # are not processed from there, so pxn itself can only come from the wheel.
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    cwd=tmp_path).strip())  # fmt: skip
    (site / "test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")

    check = textwrap.dedent(
        """
        import json
        import pxn, pxn.sim, pxn.sim.model, pxn.sim.presets, pxn.runner, pxn.calibrate
        import pxn.api, pxn.app.cli
        import pxn.calibrate.traces.pipeline, pxn.calibrate.summaries.infer, pxn.checks.conformance
        from pxn.shape import Shape
        from pxn.sim.model import simulate_once
        from pxn.sim.presets import load_scenario, preset_names
        hover = load_scenario("hover")
        summary = simulate_once(hover.replace(budget=600), Shape(2, 2), 0)
        print(json.dumps({
            "sim": pxn.sim.__file__, "model": pxn.sim.model.__file__,
            "runner": pxn.runner.__file__, "calibrate": pxn.calibrate.__file__,
            "traces": pxn.calibrate.traces.pipeline.__file__,
            "summaries": pxn.calibrate.summaries.infer.__file__,
            "presets": preset_names(), "metric_calls": summary.metric_calls,
        }))
        """
    )

    found = json.loads(run(python, "-c", check, cwd=tmp_path))
    for module in ("sim", "model", "runner", "calibrate", "traces", "summaries"):
        assert Path(found[module]).is_relative_to(venv), found
    assert {"hover", "livebench-math"} <= set(found["presets"])
    assert found["metric_calls"] >= 600
    assert (venv / "bin" / "pxn").exists()  # the console script came with the wheel
