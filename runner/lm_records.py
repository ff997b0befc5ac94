"""The records of local LM pools: one file per pool under the state directory.

Every pool of llama.cpp servers writes `pools/<id>.json` (its id: its first
server's port) as soon as its first server is spawned, and removes it when it
stops them, so `pxn lm stop` can end a pool whose starter was killed. Pids
are recycled: a server counts as alive only while a llama.cpp server
listening on its port runs under its pid. A record whose starter and servers
are all gone is stale and removed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pxn.errors import PxnError

STOP_WAIT = 15.0  # seconds a process gets to end on SIGTERM before SIGKILL


@dataclass
class Server:
    port: int
    pid: int

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def alive(self) -> bool:
        """A llama.cpp server on this port still runs under this pid."""
        try:
            raw = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False
        args = raw.decode(errors="replace").split("\0")
        return "llama_cpp.server" in args and str(self.port) in args


def state_dir() -> Path:
    """Where pools are recorded ($PXN_STATE_DIR overrides $XDG_STATE_HOME/pxn)."""
    env = os.environ.get("PXN_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pxn"


def records_dir() -> Path:
    return state_dir() / "pools"


@dataclass
class PoolRecord:
    """One pool: its servers, who started it, and where its logs are."""

    owner: int  # pid of the process that started the servers
    owner_started: int | None  # its start time in /proc, so a recycled pid is not taken for it
    started_by: str  # "pxn lm serve", "pxn run", ...
    shared: bool  # a `pxn lm serve` pool, which any run may use
    model: str
    servers: list[Server] = field(default_factory=list)
    log_dir: str | None = None
    remove_logs: bool = False  # the logs go with the pool (a run keeps its own)

    @classmethod
    def for_this_process(cls, **fields: object) -> PoolRecord:
        return cls(owner=os.getpid(), owner_started=start_time(os.getpid()), **fields)

    @property
    def id(self) -> str:
        return str(self.servers[0].port)  # a record is saved once its first server is spawned

    @property
    def path(self) -> Path:
        return records_dir() / f"{self.id}.json"

    def save(self) -> Path:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(asdict(self)), encoding="utf-8")
        partial.replace(path)  # a reader never sees half a record
        return path

    def owner_alive(self) -> bool:
        started = start_time(self.owner)
        return started is not None and started == self.owner_started and _running(self.owner)

    def live_servers(self) -> list[Server]:
        return [s for s in self.servers if s.alive()]

    def stale(self) -> bool:
        return not self.owner_alive() and not self.live_servers()

    def describe(self) -> str:
        """One line for a person: id, starter, state, ports, logs."""
        ports = ", ".join(str(s.port) for s in self.servers)
        live = len(self.live_servers())
        starter = "running" if self.owner_alive() else "gone"
        logs = f"; logs {self.log_dir}" if self.log_dir else ""
        return (
            f"pool {self.id}: {live} of {len(self.servers)} server(s) up on port(s) {ports}, "
            f"started by {self.started_by} (pid {self.owner}, {starter}){logs}"
        )

    def forget(self) -> None:
        """Remove the record, and the logs when they go with the pool."""
        self.path.unlink(missing_ok=True)
        if self.remove_logs and self.log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def read_records() -> tuple[list[PoolRecord], list[str]]:
    """(every readable record, a line for each unreadable file, which is removed)."""
    records, dropped = [], []
    for path in sorted(records_dir().glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data["servers"] = [Server(int(s["port"]), int(s["pid"])) for s in data["servers"]]
            records.append(PoolRecord(**data))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            path.unlink(missing_ok=True)
            dropped.append(f"removed {path}, not a pool record ({type(exc).__name__})")
    return records, dropped


def live_records() -> tuple[list[PoolRecord], list[str]]:
    """(the records of pools with a live starter or server, a line for each stale one
    removed)."""
    records, notes = read_records()
    live = []
    for record in records:
        if record.stale():
            record.forget()
            notes.append(
                f"removed the record of pool {record.id}: its starter and servers are gone"
            )
        else:
            live.append(record)
    return live, notes


def select(records: list[PoolRecord], which: str) -> list[PoolRecord]:
    """The pools with this id, server port or starter pid."""
    chosen = [r for r in records if which in {str(r.owner), *(str(s.port) for s in r.servers)}]
    if not chosen:
        known = ", ".join(r.id for r in records) or "none"
        raise PxnError(f"{which!r} is no running pool's id, port or starter pid (pools: {known})")
    return chosen


def stop(record: PoolRecord) -> list[int]:
    """End a pool: a pxn command that started it first (on SIGTERM it stops its own servers,
    a run closing its trace as on Ctrl-C), then any server left; the record goes. Any other
    starter (a script, a test session) is left running. Returns the pids of the servers that
    were up and are now gone."""
    up = record.live_servers()
    ours = record.started_by.startswith("pxn ") and record.owner != os.getpid()
    if ours and record.owner_alive():
        terminate(record.owner)
    for server in record.live_servers():
        terminate(server.pid)
    record.forget()
    return [s.pid for s in up if not s.alive()]


def terminate(pid: int) -> None:
    """SIGTERM, then SIGKILL if it is still there after STOP_WAIT seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_WAIT
    # Not our child: no wait() to block on, so its /proc entry is polled.
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.1)
    if _running(pid):
        os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie of ours has ended already)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the fields after the command name (which may hold spaces) start at 3.
    return int(stat.rpartition(")")[2].split()[19])
