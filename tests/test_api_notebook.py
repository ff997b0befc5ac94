"""The API in a real Jupyter kernel (nbclient runs a notebook as a user's would): a call
shows nothing by itself, a result's last-value display is its table as HTML (and as text
in a terminal), and a figure shows as an image."""

from __future__ import annotations

import base64

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.slow  # a kernel starts: a few seconds

CELLS = [
    "from pxn.api import advise, sweep\n"
    "swept = sweep('hover', shapes='single,2x2', reps=8, seed=3, jobs=1)\n"
    "advised = advise('hover', budget=3000, p='1..2', n='1..2', reps=6, seed=2, jobs=1)",
    "swept",
    "advised",
    "swept.figure()",
]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def notebook():
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(book, timeout=300, kernel_name="python3").execute()
    return book.cells


def test_a_call_shows_nothing_by_itself(notebook) -> None:
    assert notebook[0].outputs == []


@pytest.mark.parametrize(("cell", "title"), [(1, "hover: B=3000"), (2, "objective: time")])
def test_a_result_shows_its_table_as_html(notebook, cell: int, title: str) -> None:
    [shown] = notebook[cell].outputs  # one display, no side output of rich's
    assert shown.output_type == "execute_result"
    page = shown.data["text/html"]
    assert title in page[:200] and "<table>" in page and "<td " in page
    text = shown.data["text/plain"]  # a terminal's: the table, not the dataclass's fields
    assert "┃" in text and "Scenario(" not in text


def test_a_figure_shows_as_an_image(notebook) -> None:
    [shown] = notebook[3].outputs
    assert base64.b64decode(shown.data["image/png"]).startswith(PNG)
