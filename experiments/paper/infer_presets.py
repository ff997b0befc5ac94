"""Infer the paper's two setups from every figure the paper reports; write them as presets.

The paper publishes no latency distribution, acceptance rate or token count,
only run-level figures (LIVEBENCH and HOVER below hold every one of them, as
summaries files). `pxn calibrate --summaries` would infer each alone; this
script chains the two, because one reflection LM (gpt-5-mini) serves both
setups: LiveBench-Math, which reports the most, is inferred first, and its
posterior over the reflection latency (median and log-sd, each summarised as
a lognormal) is HoVer's prior for it. Run from the repository root:

    .venv/bin/python experiments/paper/infer_presets.py

It rewrites sim/presets/livebench-math.toml and sim/presets/hover.toml (each
with a header of its facts, priors, posterior and posterior predictive) and
experiments/paper/PRESET/inference.txt (the same report).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path

import numpy as np

from pxn.api.calibration_report import generation_line, inference_header, inference_lines
from pxn.calibrate.summaries.infer import Inference, infer_from_summaries
from pxn.calibrate.summaries.priors import Prior
from pxn.calibrate.summaries.reading import read_summaries
from pxn.files import write_text_atomically

HERE = Path(os.path.relpath(Path(__file__).resolve().parent))  # reports name it as run
PRESETS = HERE.parents[1] / "sim" / "presets"
LIVEBENCH = HERE / "livebench-math.summaries.toml"
HOVER = HERE / "hover.summaries.toml"
JOBS = 2
SHARED = ("reflection.scale", "reflection.s")  # the reflection LM both setups share


def told(generation) -> None:
    print(generation_line(generation), file=sys.stderr, flush=True)


def lognormal_of(inference: Inference, path: str) -> Prior:
    """A parameter's posterior draws summarised as a lognormal prior."""
    assert inference.scenario.uncertainty is not None
    logs = np.log([draw[path] for draw in inference.scenario.uncertainty.draws])
    return Prior("lognormal", float(math.exp(np.median(logs))), float(np.std(logs)))


def infer(path: Path, name: str, description: str, intro: str, **priors: Prior) -> Inference:
    summaries = read_summaries(path)
    if priors:
        summaries = dataclasses.replace(summaries, priors=summaries.priors | priors)
    inference = infer_from_summaries(summaries, name, jobs=JOBS, on_generation=told)
    scenario = inference.scenario.replace(description=description)
    header = f"{intro}\nWritten by experiments/paper/infer_presets.py; do not edit by hand.\n"
    scenario.save(PRESETS / f"{name}.toml", inference_header(inference, header))
    report = "\n".join(inference_lines(inference)) + "\n"
    write_text_atomically(HERE / name / "inference.txt", report)
    print(report)
    return inference


def main() -> None:
    livebench = infer(
        LIVEBENCH,
        "livebench-math",
        "LiveBench-Math as in the paper (inferred from its reported figures; see header)",
        'LiveBench-Math, the first setup of the source paper, "Batching the Reflective\n'
        'Optimization Loop" (arXiv 2610.36774), inferred from every figure it reports.',
    )
    shared = {path: lognormal_of(livebench, path) for path in SHARED}
    infer(
        HOVER,
        "hover",
        "HoVer as in the paper (inferred from its reported figures; see header)",
        'HoVer, the second setup of the source paper, "Batching the Reflective\n'
        'Optimization Loop" (arXiv 2610.36774), inferred from every figure it reports.\n'
        "The reflection LM's priors are LiveBench-Math's posterior (the same gpt-5-mini):\n"
        + "\n".join(f"  {path}: {prior.describe()}" for path, prior in shared.items()),
        **shared,
    )


if __name__ == "__main__":
    main()
