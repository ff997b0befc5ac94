"""Shared pytest fixtures, and the helpers that run the `pxn` CLI.

Test modules import the helpers as `from conftest import run_pxn, ...` (tests/
is on the path, as for sim_helpers). `run_pxn` runs the CLI in this process
through `pxn.app.cli.main`, exactly as the console script does but without a
new interpreter importing scipy each time; `run_pxn_script` runs the real
console script, for the few tests that keep that path honest.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PXN = Path(sys.executable).parent / "pxn"


@dataclass(frozen=True)
class Ran:
    """How a `pxn` command ended: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def run_pxn(*args: str | Path) -> Ran:
    """`pxn ARGS...` in this process."""
    from pxn.app.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(arg) for arg in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    return Ran(code, out.getvalue(), err.getvalue())


def run_pxn_script(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Ran:
    """`pxn ARGS...` through the installed console script, in a new process.

    `env` is added to this process's environment.
    """
    done = subprocess.run(
        [str(PXN), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def pxn_flags() -> set[str]:
    """Every long option of every `pxn` command."""
    import typer

    from pxn.app.cli import app

    flags, commands = set(), [typer.main.get_command(app)]
    while commands:
        command = commands.pop()
        commands += getattr(command, "commands", {}).values()  # a group's subcommands
        for param in command.params:
            flags |= {opt for opt in param.opts + param.secondary_opts if opt.startswith("--")}
    return flags


def assert_user_error(result: Ran, *fragments: str) -> None:
    """Exit code 2, exactly one line on stderr holding every fragment, nothing on stdout."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pxn: error: "), lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    """A small scenario (sim_helpers.make_scenario, budget 200) saved as TOML."""
    from sim_helpers import make_scenario

    path = tmp_path / "small.toml"
    make_scenario(budget=200).save(path)
    return path


@pytest.fixture(scope="session")
def lm_pool():
    """The real local LM pool (2 llama.cpp servers, SmolLM2-135M), started once per session
    and always stopped. Tests using it are marked `lm`."""
    from pxn.runner.lm_pool import LMPool

    with LMPool(2) as info:
        yield info
