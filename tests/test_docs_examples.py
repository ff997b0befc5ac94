"""The documentation's examples are real, checked without running anything slow.

In README.md and docs/*.md: every `pxn` command line of a shell block parses with the real
command tree (the flags exist, the choices are valid), every scenario TOML loads as a
Scenario, and the plug-in task example loads as a task whose metric works. Each example is
its own test, named by its page and line, so a failure says where the docs went wrong.
The Python API's page (docs/api.md) runs: its python blocks in order, as a notebook's cells.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from pxn.app.cli import app
from pxn.runner.tasks import Task
from pxn.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"sh", "console", "bash", "shell", "indented"}
PXN = ("pxn ", ".venv/bin/pxn ")
FENCE = re.compile(r"^\s*```\s*(\S*)")


@dataclass(frozen=True)
class Block:
    """A code block of a page: its language ("indented" for a 4-space block) and its lines."""

    page: Path
    language: str
    first_line: int  # the line number of the block's first code line
    lines: list[str]

    def place(self, offset: int = 0) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.first_line + offset}"


def code_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks and, outside them, its 4-space indented blocks."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if FENCE.match(lines[j])), len(lines))
            blocks.append(Block(page, fence.group(1).lower(), i + 2, lines[i + 1 : end]))
            i = end + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            blocks.append(Block(page, "indented", i + 1, [line[4:] for line in lines[i:end]]))
            i = end
        else:
            i += 1
    return blocks


BLOCKS = [block for page in PAGES for block in code_blocks(page)]


def command_lines(block: Block) -> list[tuple[str, str]]:
    """(place, command line) of each `pxn` line of a shell block, `\\` continuations joined."""
    found = []
    i = 0
    while i < len(block.lines):
        start, line = i, block.lines[i].strip()
        while line.endswith("\\") and i + 1 < len(block.lines):
            i += 1
            line = line[:-1] + " " + block.lines[i].strip()
        line = line.removeprefix("$ ")
        if line.startswith(PXN):
            found.append((block.place(start), line))
        i += 1
    return found


def pxn_arguments(line: str) -> list[str]:
    """The arguments the line gives `pxn`: its comment, pipe and redirections cut off."""
    words = shlex.split(line, comments=True)
    end = next(
        (k for k, w in enumerate(words) if w in {"|", "||", "&&", ";"} or re.match(r"\d*>", w)),
        len(words),
    )
    return words[1:end]


def unparseable(line: str) -> str | None:
    """Why a documented line is not a command to parse, or None when it is one."""
    if "$" in line:  # a shell variable's value is the reader's, unknown here
        return "uses a shell variable"
    if "[-" in line:  # a usage synopsis: [--flag VALUE] marks an optional flag
        return "a usage synopsis"
    if " ... " in f"{line} ":  # elided flags, completed in the prose around it
        return "elides flags with '...'"
    return None


COMMANDS = [
    pytest.param(line, id=place, marks=[pytest.mark.skip(reason=why)] if why else [])
    for block in BLOCKS
    if block.language in SHELL
    for place, line in command_lines(block)
    for why in [unparseable(line)]
]


def parse(arguments: list[str]) -> None:
    """Parse `pxn arguments` down the real command tree, as the CLI would, without running it.

    Typer ships its own copy of click: its groups and contexts are click's, under typer's names.
    """
    command = typer.main.get_command(app)
    context = command.make_context("pxn", list(arguments), resilient_parsing=False)
    while isinstance(command, TyperGroup):
        # A group's parse keeps the subcommand's name apart from the rest, as its invoke
        # reads them back.
        remaining = [*context._protected_args, *context.args]
        name, command, rest = command.resolve_command(context, remaining)
        context = command.make_context(name, rest, parent=context, resilient_parsing=False)


@pytest.mark.parametrize("line", COMMANDS)
def test_a_documented_command_parses(line: str, request: pytest.FixtureRequest) -> None:
    try:
        parse(pxn_arguments(line))
    except typer.TyperException as exc:  # click's errors: an unknown flag, a bad value
        pytest.fail(f"{request.node.callspec.id}: `{line}`: {exc.format_message()}")


def scenario_toml(block: Block) -> bool:
    """Whether a TOML block is a whole scenario (or is not TOML at all), not a fragment of one."""
    try:
        data = tomllib.loads("\n".join(block.lines))
    except tomllib.TOMLDecodeError:
        return True
    return "name" in data or "budget" in data


SCENARIOS = [
    pytest.param(block, id=block.place())
    for block in BLOCKS
    if block.language == "toml" and scenario_toml(block)
]


@pytest.mark.parametrize("block", SCENARIOS)
def test_a_documented_scenario_loads(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "scenario.toml"
    path.write_text("\n".join(block.lines) + "\n", encoding="utf-8")
    scenario = Scenario.load(path)
    assert scenario.budget > 0


TASKS = [
    pytest.param(block, id=block.place())
    for block in BLOCKS
    if block.language == "python" and block.lines and block.lines[0].startswith("# my_task.py")
]


def test_the_docs_hold_the_plug_in_example() -> None:
    assert TASKS, "no ```python block starting `# my_task.py` in README.md or docs/*.md"


@pytest.mark.parametrize("block", TASKS)
def test_the_plug_in_example_is_a_task(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "my_task.py"
    path.write_text("\n".join(block.lines) + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("my_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    task = module.make_task()
    assert isinstance(task, Task)
    assert task.splits() == {"train": 6, "val": 4, "test": 0}
    right, wrong = task.metric(task.val[0], "13"), task.metric(task.val[0], "12")
    assert (right.score, wrong.score) == (1.0, 0.0)
    assert "8 + 5 is 13" in wrong.feedback


API_PAGE = ROOT / "docs" / "api.md"
API_CELLS = [b for b in BLOCKS if b.page == API_PAGE and b.language == "python"]
HAS_PANDAS = importlib.util.find_spec("pandas") is not None


def needs_pandas(block: Block) -> bool:
    return "to_frame" in "\n".join(block.lines)


def test_the_api_page_runs_as_a_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its cells run in order in one namespace, from a folder that holds the repository's
    experiments/ (the page's paths) and takes the files a cell may write. A cell that makes
    a frame is skipped when pandas is not installed (pxn does not install it)."""
    assert [b for b in API_CELLS if needs_pandas(b)] and [
        b for b in API_CELLS if not needs_pandas(b)
    ]
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for cell in API_CELLS:
        if needs_pandas(cell) and not HAS_PANDAS:
            continue
        exec(compile("\n".join(cell.lines), cell.place(), "exec"), namespace)
    assert type(namespace["result"]).__name__ == "SweepResult"
    assert namespace["calibrated"].scenario.name == "recording"
