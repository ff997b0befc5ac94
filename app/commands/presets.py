"""`pxn presets`: the built-in scenarios."""

from __future__ import annotations

import typer

from pxn.api.console import say, stdout

commands = typer.Typer()


@commands.command()
def presets() -> None:
    """List the built-in scenarios (the paper's setups)."""
    from pxn.api.tables import Column, Grid, fit
    from pxn.durations import format_duration
    from pxn.sim.presets import load_scenario, preset_names

    grid = Grid(
        title="presets (sim/presets/; each file's header says how it was inferred)",
        columns=[
            Column("name", left=True),
            *map(Column, ("B", "V", "W", "mean\nrollout", "mean\nreflection", "search")),
        ],
    )
    scenarios = [load_scenario(name) for name in preset_names()]
    for s in scenarios:
        grid.add_row(
            s.name,
            str(s.budget),
            str(s.valset_size),
            str(s.workers),
            format_duration(s.rollout.mean()),
            format_duration(s.reflection.mean()),
            f"a0 {s.acceptance.a0:g}" if s.quality is None else f"seed {s.quality.seed_score:.3g}",
        )
    stdout.print(fit(grid, stdout))
    for s in scenarios:  # the prose below the table: a column of it would not fit
        say(f"{s.name}: {s.description}")
