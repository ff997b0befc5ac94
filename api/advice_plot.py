"""The advice as a figure: every allocation's time against its score, dollars or
iterations, the Pareto front and the recommendation (`pareto.png`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pxn.api.plots import Picture, error_bar, time_unit
from pxn.sim.predict import Interval, Prediction

if TYPE_CHECKING:
    from pxn.sim.advise import Advice, Ask, Assessment


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both coordinates (both minimised), by x."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return front


@dataclass(frozen=True)
class AdviceAxis:
    """What the advice figure's y axis shows: the expected test score under the quality
    model, else dollars where priced, else iterations."""

    scored: bool
    priced: bool

    @classmethod
    def of(cls, advice: Advice) -> AdviceAxis:
        scored = advice.scenario.quality is not None
        return cls(scored, advice.scenario.prices is not None and not scored)

    def worse(self, x: Assessment) -> float:
        """Lower is better, as the Pareto front takes it."""
        if self.scored:
            return -x.test_score.mean
        return x.dollars.mean if self.priced else -x.prediction.iterations.mean  # more: better

    def shown(self, x: Assessment) -> float:
        return self.worse(x) if self.priced else -self.worse(x)

    def interval(self, p: Prediction) -> Interval:
        return p.test_score if self.scored else p.dollars if self.priced else p.iterations

    @property
    def label(self) -> str:
        if self.scored:
            return "expected test score of the chosen candidate (mean)"
        if self.priced:
            return "predicted dollars (mean)"
        return "iterations (mean): how often the search adapts"


def advice_figure(advice: Advice) -> Figure:
    """Time against dollars (or iterations, without prices) of every allocation.

    Allocations simulated in full are coloured by W (by B, where the ask
    compares budgets); those a race dropped after its first round are faint.
    The Pareto front of the feasible ones is a step line; the recommendation
    is a star with its 5-95% intervals, and allocations within noise of it
    are ringed.
    """
    ask, axis = advice.ask, AdviceAxis.of(advice)
    unit, size = time_unit(max(x.wall_clock.mean for x in advice.assessments))
    fig = Picture(figsize=(8, 5.6), layout="constrained")
    ax = fig.subplots()
    draw_allocations(ax, advice, axis, size)
    front = pareto_front(
        [(x.wall_clock.mean, axis.worse(x)) for x in advice.assessments if x.feasible]
    )
    if front:
        sign = 1 if axis.priced else -1
        ax.step([t / size for t, _ in front], [sign * y for _, y in front], where="post",
                color="black", linewidth=1, label="Pareto front")  # fmt: skip
    draw_recommendation(ax, advice, axis, size)
    if ask.deadline is not None:
        ax.axvline(
            ask.deadline / size, color="tab:red", linestyle="--", linewidth=1, label="deadline"
        )
    if ask.max_dollars is not None and axis.priced:
        ax.axhline(
            ask.max_dollars, color="tab:orange", linestyle="--", linewidth=1, label="dollar cap"
        )
    ax.set_xlabel(f"predicted wall-clock ({unit}, mean)")
    ax.set_ylabel(axis.label)
    ax.set_title(
        f"{advice.scenario.name}: {budgets_text(ask)} metric calls, objective {ask.objective}\n"
        + (
            "score against time: the front holds what no faster allocation beats"
            if axis.scored
            else "ranks time and cost at a fixed budget, not the quality reached"
        ),
        fontsize="medium",
    )
    fig.legend(loc="outside right upper", fontsize="small")
    return fig


def draw_allocations(ax: Axes, advice: Advice, axis: AdviceAxis, size: float) -> None:
    """Every allocation: those simulated in full coloured by W (by B where budgets are
    compared: the dial that moves the figure most), those missing the deadline or the cap
    crossed, those a race dropped faint."""
    ask = advice.ask
    full = [x for x in advice.assessments if x.replicates == ask.replicates]
    dropped = [x for x in advice.assessments if x.replicates != ask.replicates]
    if ask.several_budgets:
        groups, group_of, group_label = ask.budgets, (lambda x: x.budget), ask.budget_label
    else:
        groups, group_of = ask.workers, (lambda x: x.allocation.workers)
        group_label = "W={}".format
    shades = colormaps["viridis"]([i / max(1, len(groups) - 1) for i in range(len(groups))])
    colours = dict(zip(groups, shades, strict=True))

    def scatter(points: list[Assessment], **style: Any) -> None:
        xs = [x.wall_clock.mean / size for x in points]
        ax.scatter(xs, [axis.shown(x) for x in points], **style)

    for w in groups:
        mine = [x for x in full if group_of(x) == w and x.feasible]
        scatter(mine, s=18, color=colours[w], alpha=0.8, label=group_label(w))
    over = [x for x in full if not x.feasible]
    if over:
        scatter(over, s=14, marker="x", color="lightgrey", label="misses the deadline or the cap")
    if dropped:
        scatter(dropped, s=8, color="silver", alpha=0.5,
                label=f"dropped in the race ({dropped[0].replicates} replicates)")  # fmt: skip


def draw_recommendation(ax: Axes, advice: Advice, axis: AdviceAxis, size: float) -> None:
    """The recommendation as a star with its 5-95% intervals; the runners-up ringed."""
    for x in advice.runners_up:
        ax.scatter(x.wall_clock.mean / size, axis.shown(x), s=90, facecolors="none",
                   edgecolors="tab:red")  # fmt: skip
    if advice.runners_up:
        ax.scatter(
            [], [], s=90, facecolors="none", edgecolors="tab:red", label="within noise of it"
        )
    best = advice.recommended
    if best is not None:
        p = best.prediction
        ax.errorbar(
            p.wall_clock.mean / size,
            axis.shown(best),
            xerr=error_bar(p.wall_clock, size),
            yerr=error_bar(axis.interval(p)),
            fmt="*",
            markersize=16,
            color="tab:red",
            ecolor="tab:red",
            label=f"recommended: {best.allocation.label}",
            zorder=5,
        )


def budgets_text(ask: Ask) -> str:
    """B=5000, or the budgets compared: 4 B=1000-8000."""
    budgets = ask.budgets
    if len(budgets) == 1:
        return f"B={budgets[0]}"
    return f"{len(budgets)} B={budgets[0]}-{budgets[-1]}"
