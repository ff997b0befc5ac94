"""One vocabulary: libraries name a bad input in domain words, the CLI by the flag given."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import assert_user_error, pxn_flags, run_pxn

from pxn.app.options import flag_for, in_flag_terms
from pxn.errors import PxnError

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("pxn", "sim", "runner", "calibrate")


def error_texts(path: Path) -> list[tuple[int, str]]:
    """The literal text of every PxnError(...) raised in a module, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "PxnError":
            parts = [
                part.value
                for arg in [*node.args, *(k.value for k in node.keywords)]
                for part in ast.walk(arg)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            ]
            found.append((node.lineno, "".join(parts)))
    return found


def test_no_library_error_names_a_cli_flag() -> None:
    flags = pxn_flags()
    assert {"--reps", "--address", "--ray-address", "--lm-servers"} <= flags
    errors = [
        (path, line, text)
        for folder in LIBRARIES
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, text in error_texts(path)
    ]
    assert len(errors) > 50  # the scan sees the library's errors
    named = [
        f"{path.relative_to(ROOT)}:{line} {flag}"
        for path, line, text in errors
        for flag in re.findall(r"--[a-z][a-z-]*", text)  # ray's --head is not ours
        if flag in flags
    ]
    assert named == []


@pytest.mark.parametrize(
    ("subject", "command", "flag"),
    [
        ("ray address", "sweep", "--address"),
        ("ray address", "advise", "--address"),
        ("ray address", "run", "--ray-address"),
        ("LM servers", "run", "--servers"),
        ("LM servers", "calibrate", "--lm-servers"),
        ("replicates", "validate", "--reps"),
        ("dollar cap", "advise", "--max-dollars"),
        ("shape", "sweep", "--shapes"),
        ("shape", "conformance", "--shapes"),
        ("shape", "simulate", "--shape"),
        ("eval backend", "run", "--eval-backend"),
    ],
)
def test_each_subject_has_its_commands_flag(subject: str, command: str, flag: str) -> None:
    assert flag_for(subject, command) == flag


def test_the_flag_is_named_only_when_the_user_gave_it() -> None:
    error = PxnError("must be a whole number >= 1: got 0", subject="workers")
    assert str(in_flag_terms(error, ["sweep", "x.toml", "--workers", "0"])).startswith("--workers")
    assert str(in_flag_terms(error, ["sweep", "x.toml", "--workers=0"])).startswith("--workers")
    # Not given: the input was the scenario file's own field, named as such.
    assert str(in_flag_terms(error, ["sweep", "x.toml"])).startswith("workers must")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sweep", "hover", "--backend", "ray", "--address", "127.0.0.1"],
            "--address is HOST:PORT of a Ray head, e.g. 127.0.0.1:6379: got '127.0.0.1'",
        ),
        (
            ["sweep", "hover", "--address", "127.0.0.1:6379"],
            "--address is for the ray backend; drop it, or ask for that backend",
        ),
        (["sweep", "hover", "--backend", "spark"], "--backend is local or ray: got 'spark'"),
        (["sweep", "hover", "--reps", "1"], "--reps must be >= 2 to give an interval: got 1"),
        (["advise", "hover", "--budget", "3000", "--max-dollars", "-1"], "--max-dollars must be"),
        (["advise", "hover", "--budget", "3000", "--reps", "1"], "--reps must be >= 2"),
        (["advise", "hover", "--budget", "3000", "--p", "0..2"], "--p '0..2' is not a range"),
        (["advise", "hover", "--budget", "3000", "--b", "999"], "--b 999 is larger than"),
    ],
)
def test_prediction_commands_name_their_flags(args: list[str], message: str) -> None:
    assert_user_error(run_pxn(*args), f"pxn: error: {message}")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--eval-backend", "ray", "--ray-address", "127.0.0.1"],
            "--ray-address is HOST:PORT of a Ray head",
        ),
        (["--ray-address", "127.0.0.1:6379"], "--ray-address is for the ray backend"),
        (["--eval-backend", "dask"], "--eval-backend is local or ray, got 'dask'"),
        (["--servers", "0"], "--servers must be at least 1, got 0"),
        (["--workers", "0"], "--workers must be at least 1, got 0"),
        (["--reflection-concurrency", "-1"], "--reflection-concurrency must be at least 1"),
        (["--budget", "3"], "--budget 3 is below one seed validation"),
        (["--minibatch", "999"], "--minibatch must be between 1 and the trainset's"),
    ],
)
def test_run_names_its_flags(tmp_path: Path, flags: list[str], message: str) -> None:
    out = tmp_path / "never"
    assert_user_error(run_pxn("run", "--out", out, "--no-progress", *flags), message)
    assert not out.exists()


def test_run_names_an_occupied_run_directory_by_its_flag(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl").write_text("", encoding="utf-8")
    assert_user_error(
        run_pxn("run", "--out", tmp_path, "--no-progress"),
        f"--out {tmp_path} already holds a run: resume it, or choose a new directory",
    )
