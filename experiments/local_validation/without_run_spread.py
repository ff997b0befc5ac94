"""The calibrated scenario with the runs' own conditions left out: what run_spread adds.

    .venv/bin/python experiments/local_validation/without_run_spread.py experiments/local_validation

Reads DIR/calibrated.toml (from the singles, with its parameter draws) and writes
DIR/calibrated-nospread.toml: the same point estimate and draws, each model's
run_spread at 0 (the draws' too), as a calibration that could not see runs differ
would give. `run.sh analyse` validates it beside the others.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from pxn.load import Loads
from pxn.scenario import Scenario, Uncertainty


def main(study: Path) -> None:
    scenario = Scenario.load(study / "calibrated.toml")
    loads = Loads(*(dataclasses.replace(scenario.loads.of(role), run_spread=0.0)
                    for role in ("task", "reflection")))  # fmt: skip
    draws = scenario.uncertainty
    if draws is not None:
        kept = tuple(
            {path: value for path, value in draw.items() if not path.endswith(".run_spread")}
            for draw in draws.draws
        )
        draws = Uncertainty(draws.source, kept)
    out = study / "calibrated-nospread.toml"
    description = "calibrated from the singles, each model's run_spread left out (a comparison)"
    scenario.replace(loads=loads, uncertainty=draws, description=description).save(out)
    print(f"run_spread set to 0 -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
