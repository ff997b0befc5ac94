"""The local LM pool: `pxn lm serve` and `pxn lm stop`."""

from __future__ import annotations

import signal
import time
from typing import Annotated

import typer

from pxn.app.console import say

commands = typer.Typer(help="The local LM pool (llama.cpp + SmolLM2-135M).", no_args_is_help=True)


class Stopped(Exception):
    """SIGTERM arrived: `pxn lm stop` or a supervisor asks the pool to end."""


def stop(*_: object) -> None:
    raise Stopped


def wait_for_stop() -> None:
    """Block until Ctrl-C or SIGTERM, then return; the SIGTERM handler is put back after."""
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            # Not signal.pause(): a signal flagged just before it is entered would never
            # end it (the test hung so). A signal ends a sleep at once; one flagged just
            # before a sleep is handled when that sleep ends, within a second.
            time.sleep(1.0)
    except (KeyboardInterrupt, Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@commands.command("serve")
def lm_serve(
    servers: Annotated[int, typer.Option("--servers", help="How many servers (K).")] = 2,
) -> None:
    """Start K local llama.cpp servers and keep them up until Ctrl-C (or `pxn lm stop`)."""
    from pxn.runner.lm_pool import LMPool, pidfile_path

    with LMPool(servers, pidfile=pidfile_path()) as info:
        say(f"model: {info.model} (api_key: any string)")
        for server in info.servers:
            say(f"  api_base: {server.api_base}  pid {server.pid}")
        say("Ctrl-C or `pxn lm stop` stops the pool.")
        wait_for_stop()  # then the pool's exit stops the servers


@commands.command("stop")
def lm_stop() -> None:
    """Stop the pool a `pxn lm serve` left running."""
    from pxn.runner.lm_pool import stop_standalone

    stopped = stop_standalone()
    say(f"stopped {len(stopped)} server(s)")
