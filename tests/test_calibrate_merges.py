"""gepa's merge in calibration: the merge's setup and merge_acceptance from traces with merges,
an iteration a merge took counted as no skipped task, and traces of version 1 (committed runs
recorded before the merge) calibrated as they were."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import scipy.stats
from calibrate_helpers import TRUE, write_traces

from pxn.calibrate.traces.pipeline import calibrate_traces
from pxn.shape import Shape
from pxn.trace import Merge
from pxn.trace_reading import read_trace

ROOT = Path(__file__).resolve().parents[1]
# Real runs recorded before the merge (trace version 1): the advise check's.
RECORDED = [
    ROOT / "experiments" / "advise_check" / "runs" / run for run in ("1x1-b1-s0", "3x2-b1-s0")
]

MERGING = replace(
    TRUE, merge=True, max_merges=5, components=3, merge_acceptance=0.4, skip_perfect=0.0
).validate()


def test_version_1_traces_calibrate_as_the_same_events_in_version_2(tmp_path: Path) -> None:
    """Traces of version 1; read as version 2 (the header's number changed
    alone) they give the same scenario: version 1 is version 2 without merges."""
    copies = []
    for run in RECORDED:
        lines = (run / "trace.jsonl").read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0])
        assert header["schema"] == 1
        copy = tmp_path / run.name
        copy.mkdir()
        text = "\n".join([json.dumps(header | {"schema": 2}), *lines[1:]]) + "\n"
        (copy / "trace.jsonl").write_text(text, encoding="utf-8")
        copies.append(copy)
    # Acceptance rates: the search model is not what differs between the versions.
    old, new = calibrate_traces(RECORDED, search="rates"), calibrate_traces(copies, search="rates")
    assert old.scenario.to_dict() == new.scenario.to_dict()
    assert not old.scenario.merge and old.merges.judged == 0


@pytest.fixture(scope="module")
def merging(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("merging")
    runs = write_traces(directory, MERGING, Shape(2, 2), range(6))
    return runs, calibrate_traces(runs)


def test_the_merge_setup_and_its_rate_are_calibrated(merging) -> None:
    """The setup as run_start declares it; merge_acceptance the merges' shrunk share, its
    truth inside the posterior's 99% (a 1% chance of a false failure)."""
    runs, cal = merging
    scenario = cal.scenario
    assert (scenario.merge, scenario.max_merges, scenario.components) == (True, 5, 3)
    merges = [m for run in runs for m in read_trace(run / "trace.jsonl").of(Merge)]
    judged, accepted = len(merges), sum(m.accepted for m in merges)
    assert judged >= 20 and (cal.merges.judged, cal.merges.accepted) == (judged, accepted)
    assert scenario.merge_acceptance == (accepted + 1) / (judged + 2)
    posterior = scipy.stats.beta(accepted + 1, judged - accepted + 1)
    assert posterior.ppf(0.005) < MERGING.merge_acceptance < posterior.ppf(0.995)


def test_an_iteration_a_merge_took_is_no_skipped_task(merging) -> None:
    """No parent is ever skipped in these runs: an iteration that ran a merge instead of its
    proposals must not read as k tasks skipped."""
    _, cal = merging
    assert cal.merges.judged > 0
    assert cal.skip.probability == 0.0 and cal.scenario.skip_perfect == 0.0


def test_merge_acceptance_is_among_the_parameter_draws(merging) -> None:
    runs, _ = merging
    cal = calibrate_traces(runs, draws=20)
    values = [d["merge_acceptance"] for d in cal.scenario.uncertainty.draws]
    assert len(set(values)) > 1 and all(0 < v < 1 for v in values)
