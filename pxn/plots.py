"""Figures, drawn with matplotlib's file-only backend."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from pxn.scenario import Scenario
from pxn.sim.predict import Prediction


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a person would read these durations in, and its size in seconds."""
    if seconds >= 2 * 3600:
        return "hours", 3600.0
    if seconds >= 2 * 60:
        return "minutes", 60.0
    return "seconds", 1.0


def plot_sweep(scenario: Scenario, predictions: list[Prediction], path: str | Path) -> Path:
    """Predicted wall-clock per shape with its interval, the closed form, and speedup."""
    labels = [p.shape.label for p in predictions]
    x = list(range(len(predictions)))
    unit, size = time_unit(max(p.wall_clock.high for p in predictions))
    mean = [p.wall_clock.mean / size for p in predictions]
    below = [(p.wall_clock.mean - p.wall_clock.low) / size for p in predictions]
    above = [(p.wall_clock.high - p.wall_clock.mean) / size for p in predictions]

    fig, ax = plt.subplots(figsize=(8, 5.4), layout="constrained")
    ax.errorbar(
        x,
        mean,
        yerr=[below, above],
        fmt="o",
        color="tab:blue",
        capsize=4,
        label=f"simulated mean, 5-95% ({predictions[0].replicates} replicates)",
    )
    ax.plot(
        x,
        [p.analytic.wall_clock / size for p in predictions],
        "s--",
        color="tab:orange",
        label="closed form (paper)",
    )
    ax.axhline(
        predictions[0].analytic.bound / size,
        color="grey",
        linestyle=":",
        label="strong-scaling bound B·T_e/W",
    )
    ax.set_xticks(x, labels)
    ax.set_xlabel("shape (P parents x N mutations per step)")
    ax.set_ylabel(f"predicted wall-clock ({unit})")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)

    speed = ax.twinx()
    speed.plot(x, [p.speedup for p in predictions], "^-", color="tab:green", alpha=0.8)
    speed.set_ylabel("simulated speedup vs single", color="tab:green")
    speed.tick_params(axis="y", colors="tab:green")
    speed.set_ylim(bottom=0)
    speed_handle = plt.Line2D([], [], marker="^", color="tab:green", label="speedup vs single")

    handles, _ = ax.get_legend_handles_labels()
    fig.legend(
        handles=[*handles, speed_handle], loc="outside lower center", ncols=2, fontsize="small"
    )
    ax.set_title(
        f"{scenario.name}: B={scenario.budget}, V={scenario.valset_size}, "
        f"b={scenario.minibatch}, W={scenario.workers}"
    )
    return save_figure(fig, path)


def save_figure(fig: plt.Figure, path: str | Path) -> Path:
    """Save whole or not at all: render beside the target, then rename into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        fig.savefig(partial, dpi=120)
        partial.replace(path)
    finally:
        plt.close(fig)
        partial.unlink(missing_ok=True)
    return path
