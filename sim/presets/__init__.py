"""The paper's two setups as scenarios, and the resolver the CLI uses."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pxn.errors import PxnError
from pxn.scenario import Scenario


def preset_names() -> list[str]:
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml"))


def load_scenario(name_or_path: str) -> Scenario:
    """A scenario TOML file, or the name of a preset such as 'livebench-math'.

    An existing file is read as a file; otherwise a preset's name is the preset, so
    a directory that happens to share the name (./hover) does not hide it.
    """
    path = Path(name_or_path)
    if path.is_file():
        return Scenario.load(path)
    if name_or_path in preset_names():
        preset = resources.files(__name__) / f"{name_or_path}.toml"
        return Scenario.load(Path(str(preset)))
    if path.suffix == ".toml" or path.exists():
        return Scenario.load(path)  # says why it cannot be read
    raise PxnError(
        f"no scenario file or preset named {name_or_path!r}; "
        f"presets: {', '.join(preset_names())}, or give a path to a .toml file"
    )
