"""`pxn lm ...`: the local LM pool, served, listed and stopped."""

from __future__ import annotations

import signal
import time
from typing import Annotated

import typer

from pxn.api.console import say, stderr
from pxn.app.interrupts import raise_terminated

commands = typer.Typer(help="The local LM pool (llama.cpp + SmolLM2-135M).", no_args_is_help=True)


def wait_for_stop() -> None:
    """Block until Ctrl-C or SIGTERM (`pxn lm stop`, a supervisor), then return; the SIGTERM
    handler is put back after."""
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        while True:
            # Not signal.pause(): a signal flagged just before it is entered would never
            # end it. A signal ends a sleep at once; one flagged just before a sleep is
            # handled when that sleep ends, within a second.
            time.sleep(1.0)
    except KeyboardInterrupt:  # SIGTERM's Terminated too
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@commands.command("serve")
def lm_serve(
    lm_servers: Annotated[int, typer.Option(help="How many servers (K).")] = 2,
) -> None:
    """Start K local llama.cpp servers and keep them up until Ctrl-C (or `pxn lm stop`)."""
    import os

    from pxn.runner.lm_pool import LMPool
    from pxn.runner.lm_records import state_dir
    from pxn.runner.waits import on_stderr

    logs = state_dir() / "logs" / str(os.getpid())
    pool = LMPool(
        lm_servers,
        log_dir=logs,
        started_by="pxn lm serve",
        shared=True,
        remove_logs=True,
        tell=on_stderr,
    )
    with pool as info:
        say(f"pool {pool.record.id}: model {info.model} (api_key: any string); logs in {logs}")
        for server in info.servers:
            say(f"  api_base: {server.api_base}  pid {server.pid}")
        say(f"Ctrl-C or `pxn lm stop {pool.record.id}` stops the pool.")
        wait_for_stop()  # then the pool's exit stops the servers


@commands.command("list")
def lm_list() -> None:
    """List the recorded LM pools, running or left behind by a killed process."""
    from pxn.runner.lm_records import live_records, records_dir

    records, notes = live_records()
    for note in notes:
        say(note, stderr)
    if not records:
        say(f"no LM pool is recorded in {records_dir()}")
    for record in records:
        say(record.describe())


@commands.command("stop")
def lm_stop(
    pool: Annotated[
        str | None,
        typer.Argument(help="The pool's id (`pxn lm list`), a port of it, or its starter's pid."),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Stop every recorded pool.")] = False,
) -> None:
    """Stop a pool `pxn lm serve` keeps up, or one a killed `pxn run` left behind."""
    from pxn.errors import PxnError
    from pxn.runner.lm_records import live_records, records_dir, select, stop

    if pool is not None and every:
        raise PxnError("give a pool's id or --all, not both")
    records, notes = live_records()
    for note in notes:
        say(note, stderr)
    if not records:
        raise PxnError(f"no running LM pool is recorded in {records_dir()}; nothing to stop")
    if pool is None and not every and len(records) > 1:
        ids = ", ".join(r.id for r in records)
        raise PxnError(
            f"{len(records)} pools are running ({ids}; see `pxn lm list`); "
            "give one's id or port, or --all"
        )
    for record in records if pool is None else select(records, pool):
        stopped = stop(record)
        say(f"stopped {len(stopped)} server(s) of pool {record.id} ({record.started_by})")
