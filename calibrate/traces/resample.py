"""One bootstrap resample as every part's refit reads it (draws.py): the calibration whose
models the refits keep, the resampled units, each model's slowdown refitted to them, and
the calls as the simulator draws them at those slowdowns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pxn.calibrate.traces.pipeline import Calibration
    from pxn.calibrate.traces.units import Calls, Units
    from pxn.scenario import Scenario


@dataclass(frozen=True)
class Resample:
    calibration: Calibration
    units: Units
    betas: dict[str, float]  # each model's load slowdown, refitted (0 where none was kept)
    served: Calls  # the resampled calls served alone, at `betas`

    @property
    def scenario(self) -> Scenario:
        """The point estimate: the model each refit keeps."""
        return self.calibration.scenario
