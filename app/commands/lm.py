"""The local LM pool: `pxn lm serve` and `pxn lm stop`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pxn.app.console import stdout

commands = typer.Typer(help="The local LM pool (llama.cpp + SmolLM2-135M).", no_args_is_help=True)


@commands.command("serve")
def lm_serve(
    servers: Annotated[int, typer.Option("--servers", help="How many servers (K).")] = 2,
) -> None:
    """Start K local llama.cpp servers and keep them up until Ctrl-C (or `pxn lm stop`)."""
    import signal

    from pxn.runner.lm_pool import LMPool, pidfile_path

    with LMPool(servers, pidfile=pidfile_path()) as info:
        stdout.print(f"model: {info.model} (api_key: any string)", markup=False)
        for server in info.servers:
            stdout.print(f"  api_base: {server.api_base}  pid {server.pid}", markup=False)
        stdout.print("Ctrl-C or `pxn lm stop` stops the pool.", markup=False)
        # Block until a signal: SIGTERM (from `pxn lm stop` or a supervisor) ends us cleanly.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while True:
                signal.pause()
        except KeyboardInterrupt:
            pass


@commands.command("stop")
def lm_stop() -> None:
    """Stop the pool a `pxn lm serve` left running."""
    from pxn.runner.lm_pool import stop_standalone

    stopped = stop_standalone()
    stdout.print(f"stopped {len(stopped)} server(s)", markup=False)
