"""One run as a Gantt chart of its workers and reflections, coloured by phase
(`pxn plot timeline`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from pxn.api.plots import Picture, time_unit

if TYPE_CHECKING:
    from pxn.trace_reading import Trace


PHASE_COLOURS = {
    "seed_val": "tab:gray",
    "merge_subsample": "tab:brown",
    "parent_minibatch": "tab:blue",
    "reflection": "tab:purple",
    "child_minibatch": "tab:orange",
    "full_val": "tab:green",
}


def timeline_figure(trace: Trace, until_iteration: int | None = None) -> Figure:
    """A Gantt chart of one run: its W workers, then its C reflections, coloured by phase.

    Dotted vertical lines are iteration boundaries: the barriers. A gap on a
    row inside an iteration is a worker left idle by them.
    """
    from pxn.trace import Iteration, Reflection, Rollout

    start = trace.run_start
    iterations = trace.of(Iteration)
    end = max(e.end for e in trace.events)
    if until_iteration is not None:
        ends = [i.end for i in iterations if i.iteration == until_iteration]
        end = ends[0] if ends else end
    rollouts = [r for r in trace.of(Rollout) if r.start <= end]
    reflections = [r for r in trace.of(Reflection) if r.start <= end]
    workers = sorted({r.worker for r in rollouts})
    slots = sorted({r.slot for r in reflections})
    row = {("w", w): i for i, w in enumerate(workers)}
    row |= {("r", s): len(workers) + i for i, s in enumerate(slots)}
    calls = [(r.phase, row["w", r.worker], r) for r in rollouts]
    calls += [("reflection", row["r", r.slot], r) for r in reflections]
    bars: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for phase, y, call in calls:
        bars.setdefault(phase, {}).setdefault(y, []).append((call.start, call.duration))
    unit, size = time_unit(end)
    rows = len(row)
    # White edges separate calls when zoomed in; over a long run they would
    # swallow the thin bars, so they go.
    shown_iterations = sum(1 for i in iterations if i.end <= end)
    edge = 0.3 if shown_iterations <= 30 else 0.0
    fig = Picture(figsize=(11, min(2.2 + 0.28 * rows, 14)), layout="constrained")
    ax = fig.subplots()
    for phase, by_row in bars.items():
        for y, spans in by_row.items():
            ax.broken_barh(
                [(s / size, d / size) for s, d in spans],
                (y - 0.4, 0.8),
                facecolors=PHASE_COLOURS.get(phase, "black"),
                edgecolor="white",
                linewidth=edge,
            )
    for it in iterations:
        if it.end <= end:
            ax.axvline(it.end / size, color="black", linestyle=":", linewidth=0.7, alpha=0.6)
    last = max((i.end for i in iterations), default=end)
    if until_iteration is None and end - last > 0.01 * end:
        # The runner's own epilogue (a test-set evaluation): not part of gepa's loop.
        ax.axvspan(last / size, end / size, color="lightgray", alpha=0.5, zorder=0)
        ax.text((last + end) / 2 / size, rows / 2, "after gepa's loop", ha="center",
                va="center", rotation=90, fontsize="small", color="dimgray")  # fmt: skip
    if slots:
        ax.axhline(len(workers) - 0.5, color="black", linewidth=1)
    labels = [f"worker {w}" for w in workers] + [f"reflection {s}" for s in slots]
    step = max(1, rows // 40)  # keep row labels legible on wide pools
    ax.set_yticks(range(0, rows, step), labels[::step], fontsize="small")
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlim(0, end / size)
    ax.set_xlabel(f"time since run start ({unit})")
    shown = "" if until_iteration is None else f", iterations up to {until_iteration}"
    ax.set_title(
        f"{start.source} run, shape {start.shape}, W={start.workers}, B={start.budget}{shown}"
    )
    handles = [
        Rectangle((0, 0), 1, 1, color=colour, label=phase)
        for phase, colour in PHASE_COLOURS.items()
        if phase in bars
    ]
    handles.append(Line2D([], [], color="black", linestyle=":", label="iteration boundary"))
    fig.legend(handles=handles, loc="outside lower center", ncols=6, fontsize="small")
    return fig
