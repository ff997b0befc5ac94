"""`--help` shows every help text whole: Rich, which typer renders it with, reads
`[word]` as markup and drops it, so a scenario's table named in a help (`[quality]`)
is written escaped, `\\[quality]`."""

from __future__ import annotations

import inspect

import typer
from conftest import run_pxn
from rich.text import Text


def help_texts() -> dict[str, str]:
    """Every help text of every `pxn` command and group and of their parameters, by where."""
    from pxn.app.cli import app

    found, todo = {}, [("pxn", typer.main.get_command(app))]
    while todo:
        words, command = todo.pop()
        todo += [(f"{words} {name}", sub) for name, sub in getattr(command, "commands", {}).items()]
        found[words] = command.help or ""
        found |= {
            f"{words} {param.name}": getattr(param, "help", None) or "" for param in command.params
        }
    return found


def loses_text_to_markup(text: str) -> bool:
    """Whether Rich shows less of `text` than it says, an escaped `\\[` aside."""
    written = inspect.cleandoc(text)
    return Text.from_markup(written).plain != written.replace("\\[", "[")


def test_rich_markup_takes_nothing_from_any_help() -> None:
    texts = help_texts()
    assert {"pxn advise objective", "pxn lm serve", "pxn plot timeline"} <= set(texts)
    assert loses_text_to_markup("needs [quality]") and not loses_text_to_markup(r"needs \[quality]")
    assert [where for where, text in texts.items() if loses_text_to_markup(text)] == []


def test_advise_help_names_the_quality_table() -> None:
    shown = run_pxn("advise", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "[quality]" in shown.stdout
