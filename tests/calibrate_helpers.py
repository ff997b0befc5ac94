"""Simulated traces with known truth: the fixtures calibration is tested against."""

from __future__ import annotations

import contextlib
import io
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from pxn.cli import main
from pxn.scenario import Acceptance, Distribution, Scenario, Shape
from pxn.sim.model import simulate_once
from pxn.trace import TraceWriter

# The truth the round trip must recover.
ROLLOUT = Distribution("gamma", params={"a": 3.0, "scale": 0.7})  # mean 2.1 s
REFLECTION = Distribution("lognorm", params={"s": 0.3, "scale": 9.0})  # median 9 s
TRUE = Scenario(
    name="truth",
    budget=2000,
    valset_size=20,
    trainset_size=50,
    workers=8,
    rollout=ROLLOUT,
    reflection=REFLECTION,
    acceptance=Acceptance(0.25),
    minibatch=3,
    reflection_concurrency=10,
    stage_overhead=0.2,
    skip_perfect=0.1,
    seed=11,
).validate()


def write_traces(
    directory: Path, scenario: Scenario, shape: Shape, replicates: range
) -> list[Path]:
    """One trace per replicate, as runs/NAME/trace.jsonl directories."""
    paths = []
    for r in replicates:
        run = directory / f"{shape}-r{r}"
        run.mkdir(parents=True)
        with TraceWriter(run / "trace.jsonl") as writer:
            simulate_once(scenario, shape, r, writer)
        paths.append(run)
    return paths


def relative(value: float, truth: float) -> float:
    return abs(value - truth) / abs(truth) if truth else math.inf


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def pxn(*args: str | Path) -> Result:
    """Run the CLI in this process, through main() exactly as the console script does.

    A subprocess per case would spend most of the test's time importing scipy;
    test_calibrate_robustness runs the real console script once to keep that path honest.
    """
    out, err = io.StringIO(), io.StringIO()
    argv = ["pxn", *map(str, args)]
    code = 0
    with (
        mock_argv(argv),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def mock_argv(argv: list[str]):
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def assert_user_error(result: Result, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pxn: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
