"""The README's plug-in task example is real code: it loads as a task and its metric works."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from pxn.runner.tasks import Task

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_plug_in_example_in_the_readme_is_a_task(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    [example] = [b for b in blocks if b.startswith("# my_task.py")]
    path = tmp_path / "my_task.py"
    path.write_text(example, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("my_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    task = module.make_task()
    assert isinstance(task, Task)
    assert task.splits() == {"train": 6, "val": 4, "test": 0}
    right, wrong = task.metric(task.val[0], "13"), task.metric(task.val[0], "12")
    assert (right.score, wrong.score) == (1.0, 0.0)
    assert "8 + 5 is 13" in wrong.feedback
