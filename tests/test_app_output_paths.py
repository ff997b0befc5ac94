"""Output paths are checked before any work: by trying, since permission bits say nothing
for root or a virtual file system, and without leaving anything behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from pxn.app.output import check_writable
from pxn.errors import PxnError

UNWRITABLE = Path("/proc/pxn-nowhere")  # /proc takes no new file, even from root


def refusal(path: Path, subject: str, directory: bool = False) -> PxnError:
    with pytest.raises(PxnError) as caught:
        check_writable(path, subject, directory)
    return caught.value


def test_a_directory_on_a_file_system_that_takes_no_file_is_refused() -> None:
    error = refusal(UNWRITABLE / "sweep", "out", directory=True)
    assert error.subject == "out"
    assert "cannot be written" in error.problem


def test_each_kind_of_bad_path_names_its_own_input(tmp_path: Path) -> None:
    a_file = tmp_path / "a.txt"
    a_file.write_text("x")
    assert refusal(a_file / "t.jsonl", "trace").subject == "trace"
    assert "is a file, not a directory" in refusal(a_file, "plots", directory=True).problem
    assert "is a directory, not a file" in refusal(tmp_path, "output").problem
    assert "too long" in refusal(tmp_path / ("n" * 300), "output").problem


def test_writable_paths_pass_and_the_check_leaves_nothing(tmp_path: Path) -> None:
    check_writable(tmp_path / "new" / "t.jsonl", "trace")
    check_writable(None, "chrome")
    check_writable(tmp_path / "a" / "b", "out", directory=True)
    check_writable(tmp_path, "plots", directory=True)
    assert list(tmp_path.iterdir()) == []  # no probe, and no directory made ahead of the work
