"""A user's messy dspy.GEPA run on the real local LM: the proposals it loses are in its trace,
calibration fits them, and the scenario reproduces the run it came from.

The messy-run study's script (experiments/messy_runs/program.py: two predictors, a graded
metric, DSPy's defaults) on SmolLM2, whose replies DSPy's adapter and proposer often
cannot parse: most minibatches build no reflective dataset and most reflections fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pxn.api import calibrate
from pxn.run_summary import summarize
from pxn.trace import LOST_REASONS, NoProposal, Reflection
from pxn.trace_reading import read_one

PROGRAM = Path(__file__).resolve().parents[1] / "experiments" / "messy_runs" / "program.py"


@pytest.mark.lm
@pytest.mark.slow
def test_a_messy_dspy_run_tells_its_lost_proposals_and_reproduces(tmp_path: Path, lm_pool):
    task, reflection = (s.api_base for s in lm_pool.servers[:2])
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(PROGRAM), str(out), task, reflection, "--budget", "40"],
        capture_output=True,
        text=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    trace = read_one(out)
    lost = [e for e in trace.of(NoProposal) if e.reason in LOST_REASONS]
    assert lost, "SmolLM2 under DSPy's adapter loses proposals: none was told"
    assert all(e.error for e in lost if e.reason in ("reflective_dataset", "reflection_failed"))
    # A task lost in its reflection had its last call fail.
    for e in lost:
        if e.reason == "reflection_failed":
            calls = [r for r in trace.of(Reflection) if (r.iteration, r.proposal) ==
                     (e.iteration, e.proposal)]  # fmt: skip
            assert calls and calls[-1].error
    summary = summarize(trace)
    assert summary.failed == len(lost) and summary.no_proposal_iterations > 0

    result = calibrate([out], draws=20)
    assert result.scenario.failures.any and result.scenario.optimizer == "dspy.GEPA"
    assert result.reproduces, "\n".join(result.lines[:10])
