"""Whether a calibrated scenario reproduces the very runs it was fitted to.

Each calibration run is simulated at its own setup (pxn/setups.py) over many replicates
of the scenario, its draws included, and every figure it measured is set beside their
5-95%. A run shows eight figures, so a miss alone is no verdict: the scenario "does not
reproduce" its runs when a figure lies beyond its replicates' 1-99% or when more figures
miss than chance allows (a binomial test against 10% at the 5% level).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from pxn.calibrate.traces.overhead import loop_end
from pxn.run_summary import RunSummary, summarize
from pxn.scenario import Scenario
from pxn.setups import by_setup
from pxn.shape import Shape
from pxn.sim.backends import Backend
from pxn.sim.predict import simulate_shapes
from pxn.stats import PERCENTILES, p_coverage
from pxn.trace_reading import Trace

GROSS = 0.01  # a figure with fewer replicates than this as far out is a gross miss
SIGNIFICANCE = 0.05  # of the test that the runs miss more often than chance allows
REPLICATES = 200

# What each figure is, read off a run's summary (measured or simulated).
FIGURES: dict[str, Callable[[RunSummary], float | None]] = {
    "wall-clock": lambda s: s.wall_clock,
    "iterations": lambda s: s.iterations,
    "proposals": lambda s: s.proposals,
    "accepted": lambda s: s.accepted + s.merges_accepted,
    "full validations": lambda s: s.full_val_iterations,
    "lost proposals": lambda s: s.failed,
    "seed score": lambda s: s.seed_score,
    "best score": lambda s: s.best_score,
}


@dataclass(frozen=True)
class FigureCheck:
    """One figure of one run beside its replicates."""

    run: str
    figure: str
    measured: float
    low: float  # the replicates' 5th percentile
    high: float  # 95th
    below: float  # share of replicates at or below the measured figure
    above: float  # share at or above it

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high

    @property
    def gross(self) -> bool:
        """Beyond the replicates' 1-99%: fewer than 1 in 100 replicates as far out."""
        return min(self.below, self.above) < GROSS

    def line(self) -> str:
        values = (self.measured, self.low, self.high)
        if self.figure == "wall-clock":
            measured, low, high = (f"{x:.0f}" for x in values)
            measured, high = f"{measured} s", f"{high} s"
        elif "score" in self.figure:
            measured, low, high = (f"{x:.3g}" for x in values)
        else:  # counts, whose percentiles may fall between two
            measured, low, high = (f"{x:.1f}".removesuffix(".0") for x in values)
        side = "above" if self.measured > self.high else "below"
        far = " (gross: beyond 99% of replicates)" if self.gross else ""
        return f"{self.run}: {self.figure} {measured}, predicted 5-95% [{low}, {high}]: {side}{far}"


@dataclass(frozen=True)
class Reproduction:
    """Every calibration run's figures beside the scenario's replicates of that run."""

    checks: tuple[FigureCheck, ...]
    replicates: int
    skipped: tuple[str, ...] = ()  # runs not simulated again, each with its reason

    @property
    def misses(self) -> list[FigureCheck]:
        return [c for c in self.checks if not c.inside]

    @property
    def gross(self) -> list[FigureCheck]:
        return [c for c in self.checks if c.gross]

    @property
    def miss_pvalue(self) -> float:
        """How likely this many misses (or more) are when every interval holds 90%."""
        if not self.checks:
            return 1.0
        inside = len(self.checks) - len(self.misses)
        return p_coverage(inside, len(self.checks), "less")

    @property
    def holds(self) -> bool:
        return not self.gross and self.miss_pvalue >= SIGNIFICANCE

    def lines(self) -> list[str]:
        """The report's first paragraph: the verdict, then one line per figure that missed."""
        runs = len({c.run for c in self.checks})
        skipped = [f"  not reproduced: {reason}" for reason in self.skipped]
        if not runs:
            return ["reproduction: no calibration run to simulate again", *skipped]
        told = (
            f"{len(self.checks) - len(self.misses)} of {len(self.checks)} figures of the "
            f"{runs} calibration run(s) inside their predicted 5-95% ({self.replicates} "
            "replicates of each run's own setup)"
        )
        if self.holds:
            head = f"reproduces its own runs: {told}"
        else:
            why = []
            if self.gross:
                why.append(f"{len(self.gross)} figure(s) beyond 99% of replicates")
            if self.miss_pvalue < SIGNIFICANCE:
                why.append(f"more misses than chance allows (p = {self.miss_pvalue:.2g})")
            head = (
                f"DOES NOT REPRODUCE ITS OWN RUNS ({'; '.join(why)}): {told}; predictions "
                "from it are not to be trusted (docs/calibration.md says what to try)"
            )
        return [head, *(f"  {check.line()}" for check in self.misses), *skipped]

    def to_dict(self) -> dict[str, object]:
        return {
            "holds": self.holds,
            "replicates": self.replicates,
            "miss_pvalue": self.miss_pvalue,
            "skipped": list(self.skipped),
            "checks": [
                {k: v for k, v in asdict(c).items() if k not in ("below", "above")}
                | {"inside": c.inside, "gross": c.gross}
                for c in self.checks
            ],
        }


def reproduce(
    scenario: Scenario,
    traces: list[Trace],
    replicates: int = REPLICATES,
    backend: Backend | None = None,
) -> Reproduction:
    """Simulate every trace's own setup from `scenario`; set each figure beside its replicates."""
    # A run cut short, or ended by its own stopper (no budget), is no run to reproduce.
    kept = [t for t in traces if reproducible(t) is None]
    skipped = tuple(f"{run_name(t)}: {reproducible(t)}" for t in traces if t not in kept)
    if not kept:
        return Reproduction((), replicates, skipped)
    checks: list[FigureCheck] = []
    for at_setup, shapes, group in by_setup(scenario, kept):
        runs = simulate_shapes(at_setup, shapes, replicates, backend=backend)
        for trace in group:
            simulated = runs[Shape.parse(trace.run_start.shape)]
            checks.extend(figure_checks(trace, simulated))
    order = {run_name(t): i for i, t in enumerate(traces)}
    checks.sort(key=lambda c: order.get(c.run, len(order)))
    return Reproduction(tuple(checks), replicates, skipped)


def reproducible(trace: Trace) -> str | None:
    """Why a calibration run is not simulated again (None: it is)."""
    end = trace.run_end
    if end is None or end.status != "completed":
        return "not completed: its figures are a part run's"
    if not trace.run_start.budget:
        return "ended by its own stop_callbacks (no budget): the simulator runs to a budget"
    return None


def run_name(trace: Trace) -> str:
    """A run as the report names it: its run directory, or its trace file."""
    return trace.path.parent.name if trace.path.name == "trace.jsonl" else trace.path.name


def figure_checks(trace: Trace, simulated: list[RunSummary]) -> list[FigureCheck]:
    """Each figure the run measured, beside the replicates that have it."""
    measured = summarize(trace)
    checks = []
    for figure, read in FIGURES.items():
        value = loop_end(trace) if figure == "wall-clock" else read(measured)
        predicted = [read(s) for s in simulated]
        predicted = [p for p in predicted if p is not None and math.isfinite(p)]
        if value is None or not math.isfinite(value) or not predicted:
            continue
        values = np.asarray(predicted, dtype=float)
        low, high = np.percentile(values, PERCENTILES)
        checks.append(
            FigureCheck(
                run=run_name(trace),
                figure=figure,
                measured=float(value),
                low=float(low),
                high=float(high),
                below=float(np.mean(values <= value)),
                above=float(np.mean(values >= value)),
            )
        )
    return checks
