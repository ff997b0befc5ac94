"""Output paths are checked before any work: by trying, since permission bits say nothing
for root or a virtual file system, and without leaving anything behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from pxn.app.output import ensure_writable_outputs
from pxn.errors import PxnError

UNWRITABLE = Path("/proc/pxn-nowhere")  # /proc takes no new file, even from root


def refusal(**outputs) -> PxnError:
    with pytest.raises(PxnError) as caught:
        ensure_writable_outputs(**outputs)
    return caught.value


def test_a_directory_on_a_file_system_that_takes_no_file_is_refused() -> None:
    error = refusal(directories={"out": UNWRITABLE / "sweep"})
    assert error.subject == "out"
    assert "cannot be written" in error.problem


def test_each_kind_of_bad_path_names_its_own_input(tmp_path: Path) -> None:
    a_file = tmp_path / "a.txt"
    a_file.write_text("x")
    assert refusal(files={"trace": a_file / "t.jsonl"}).subject == "trace"
    assert "is a file, not a directory" in refusal(directories={"plots": a_file}).problem
    assert "is a directory, not a file" in refusal(files={"output": tmp_path}).problem
    assert "too long" in refusal(files={"output": tmp_path / ("n" * 300)}).problem


def test_writable_paths_pass_and_the_check_leaves_nothing(tmp_path: Path) -> None:
    ensure_writable_outputs(
        files={"trace": tmp_path / "new" / "t.jsonl", "chrome": None},
        directories={"out": tmp_path / "a" / "b", "plots": tmp_path},
    )
    assert list(tmp_path.iterdir()) == []  # no probe, and no directory made ahead of the work
