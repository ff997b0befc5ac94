"""Calibrating the reflection prefix cache: planted in simulated singles, recovered.

The singles never send two reflections a step, so the saving is not in
their latencies; it is the seconds per input token (planted: reflection
latency grows 2 ms per input token) times the prefix tokens each reflection
records (planted: a normal around PREFIX).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from calibrate_helpers import TOKENS, TRUE, relative, write_token_traces
from conftest import assert_user_error, run_pxn

from pxn.calibrate.traces.pipeline import Calibration, calibrate_traces
from pxn.load import Load, Loads
from pxn.scenario import Scenario
from pxn.shape import Shape

pytestmark = pytest.mark.slow  # calibration round trips on simulated traces

PREFIX = 400.0  # mean prompt tokens siblings share
POOL = Loads(Load(servers=2), Load(servers=2))


def plant_prefix_tokens(paths: list[Path], seed: int = 7) -> list[int]:
    """Give every reflection a prefix_tokens (its parent's first none, as the runner does)."""
    rng = np.random.default_rng(seed)
    planted = []
    for path in paths:
        trace = path / "trace.jsonl"
        seen: set[str] = set()
        lines = []
        for line in trace.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["kind"] == "reflection":
                value = None
                if event["parent"] in seen:
                    value = int(min(event["tokens_in"] - 1, max(1, rng.normal(PREFIX, 40))))
                    planted.append(value)
                seen.add(event["parent"])
                event["prefix_tokens"] = value
            lines.append(json.dumps(event))
        trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return planted


@pytest.fixture(scope="module")
def singles(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[int]]:
    root = tmp_path_factory.mktemp("prefix")
    paths = write_token_traces(root, TRUE.replace(loads=POOL), TOKENS, Shape(1, 1), range(4))
    return paths, plant_prefix_tokens(paths)


@pytest.fixture(scope="module")
def declared(singles: tuple[list[Path], list[int]]) -> Calibration:
    return calibrate_traces(singles[0], prefix_cache=True, draws=20)


def test_the_saving_is_the_input_tokens_cost_of_the_shared_prefix(declared: Calibration) -> None:
    fit = declared.prefix_cache
    assert fit.caches and fit.recorded > 20
    truth = TOKENS.seconds_per_input_token * PREFIX
    assert relative(fit.seconds, truth) < 0.25
    assert fit.interval is not None and fit.interval[0] <= truth <= fit.interval[1]
    assert declared.scenario.loads.reflection.prefix_seconds == fit.seconds
    assert declared.scenario.loads.task.prefix_seconds == 0


def test_the_draws_carry_the_savings_uncertainty(declared: Calibration) -> None:
    drawn = [d["load.reflection.prefix_seconds"] for d in declared.scenario.uncertainty.draws]
    assert len(set(drawn)) > 10  # refitted per draw, not held
    low, high = declared.prefix_cache.interval
    assert low < np.median(drawn) < high


def test_the_mean_prefix_is_the_recorded_one(
    singles: tuple[list[Path], list[int]], declared: Calibration
) -> None:
    assert declared.prefix_cache.prefix_tokens == pytest.approx(np.mean(singles[1]))


def test_no_cache_is_modelled_unless_the_servers_are_known_or_declared_to_cache(
    singles: tuple[list[Path], list[int]],
) -> None:
    # Simulated traces do not name llama-cpp-python: auto says no, and why.
    auto = calibrate_traces(singles[0])
    assert auto.scenario.loads.reflection.prefix_seconds == 0
    assert "--prefix-cache yes" in auto.prefix_cache.why
    refused = calibrate_traces(singles[0], prefix_cache=False)
    assert refused.scenario.loads.reflection.prefix_seconds == 0


def test_the_cli_reports_the_saving_and_writes_it(
    singles: tuple[list[Path], list[int]], tmp_path: Path
) -> None:
    out = tmp_path / "cached.toml"
    result = run_pxn(
        "calibrate", *map(str, singles[0]), "-o", str(out), "--draws", "0", "--prefix-cache", "yes"
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("reflection prefix cache"))
    saving = Scenario.load(out).loads.reflection.prefix_seconds
    assert saving > 0 and f"prefix_seconds={saving:.4g}" in line
    simulated = run_pxn("simulate", str(out), "--shape", "4x4", "--reps", "4")
    assert simulated.returncode == 0, simulated.stderr
    assert f"saves {saving:.3g} s (prefix cache)" in " ".join(simulated.stdout.split())
    assert_user_error(
        run_pxn("calibrate", *map(str, singles[0]), "-o", str(out), "--prefix-cache", "maybe"),
        "--prefix-cache must be auto, yes or no",
    )
