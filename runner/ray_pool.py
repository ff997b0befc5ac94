"""`pxn run --backend ray`: the rollouts of a run as Ray tasks, at most W in flight.

W Ray actors, one per slot, each created with num_cpus=0 (a rollout waits on
an LM, not a CPU) and run `adapter.run_rollout`, as the thread pool does; a
slot gets its next rollout only when its last is back. Actors, not plain
tasks: idle 0-CPU task workers are killed and each new one pays its imports
inside a stage (docs/ray.md); actors are warmed before the run's clock starts.

Each rollout is timed inside its task with time.time(), put on the run's
clock through an anchor taken at each stage's start, and clamped between the
driver's submit and receipt; this assumes the nodes' clocks agree. Tasks
carry no keys (litellm reads them from each worker's environment) and each
actor loads the task by its spec, which must be importable on every node.
"""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pxn.errors import PxnError
from pxn.ray_cluster import RayConnection
from pxn.runner.adapter import OnFailure, RolloutOutcome, RolloutRequest, run_rollout
from pxn.runner.lm import LMClient
from pxn.runner.lm_pool import PoolInfo
from pxn.runner.redact import describe_error
from pxn.runner.retry import RetryPolicy
from pxn.runner.tasks import load_task
from pxn.runner.waits import PROBE_TIMEOUT

PRIVATE_CPUS = 2  # logical CPUs of a private local Ray; rollouts reserve none
RESTARTS = 2  # a worker whose process dies is restarted, its rollout retried, this often


@dataclass(frozen=True)
class Endpoint:
    """How a worker reaches the task LM: what `LMClient` is built from, never a key."""

    model: str
    policy: RetryPolicy
    pool: PoolInfo | None = None  # the local llama.cpp pool, when the task LM is it
    api_base: str | None = None
    probe_timeout: float = PROBE_TIMEOUT  # seconds for the model to answer each worker

    @property
    def servers(self) -> int:
        return len(self.pool.servers) if self.pool is not None else 0

    def client(self, server: int | None, seed: int) -> LMClient:
        """A client of one pool server (the driver picks it), or of the model string."""
        pool = None
        if self.pool is not None and server is not None:
            pool = PoolInfo(self.pool.model, [self.pool.servers[server]])
        return LMClient(
            self.model, pool=pool, api_base=self.api_base, policy=self.policy, seed=seed
        )


class RolloutWorker:
    """One slot's Ray actor: the task and LM clients loaded once, rollouts run one at a time."""

    def __init__(self, task_spec: str | None, endpoint: Endpoint, seed: int):
        # A constructor that raises kills the actor with a screenful of Ray traceback;
        # the error is kept instead, and `ready` names it in one line.
        self.problem: str | None = None
        try:
            self.task = load_task(task_spec)
        except Exception as exc:
            why = str(exc) if isinstance(exc, PxnError) else describe_error(exc)
            self.problem = f"cannot load the task: {why}"
        self.endpoint = endpoint
        self.seed = seed
        self.clients: dict[int | None, LMClient] = {}

    def _client(self, server: int | None) -> LMClient:
        if server not in self.clients:
            # Seeds differ per actor and server: the same prompt sampled on two slots
            # must not draw the same numbers.
            self.clients[server] = self.endpoint.client(server, self.seed + (server or 0))
        return self.clients[server]

    def ready(self, server: int | None) -> tuple[str, str | None]:
        """(node id, problem): the task loaded, and the task model's probe answered from this
        worker within its timeout, so litellm's lazy imports and the key's presence are
        settled before timing."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        if self.problem is not None:
            return node, self.problem
        try:
            self._client(server).probe("task", self.endpoint.probe_timeout)
        except PxnError as exc:
            return node, f"{exc}; its key must be set in the environment of every Ray node"
        return node, None

    def rollout(self, request: RolloutRequest, server: int | None) -> RolloutOutcome:
        import ray

        outcome = run_rollout(self.task, self._client(server), request, time.time)
        context = ray.get_runtime_context()
        outcome.node, outcome.task_id = context.get_node_id(), context.get_task_id()
        return outcome


class RayRollouts:
    """W Ray actors on the cluster at `address`, or on a private local Ray started for the
    run; `start()` creates them and checks each reaches the LM."""

    def __init__(self, workers: int, address: str | None = None):
        self.workers = workers
        self.address = address
        self._connection = RayConnection(address, PRIVATE_CPUS if address is None else None)
        self._ray: Any = None
        self._actors: list[Any] = []
        self._busy: list[int] = []  # rollouts in flight per local LM server
        self.nodes: list[str] = []  # the Ray node of each slot

    def __enter__(self) -> RayRollouts:
        main = threading.current_thread() is threading.main_thread()
        handler = signal.getsignal(signal.SIGTERM) if main else None
        self._ray = self._connection.open()  # ray.init installs a SIGTERM handler (sys.exit) ...
        if main:  # ... which would end a run without its run_end: the caller's stays
            signal.signal(signal.SIGTERM, handler)
        return self

    def start(self, task_spec: str | None, endpoint: Endpoint, seed: int) -> None:
        ray = self._ray
        self._busy = [0] * endpoint.servers
        worker = ray.remote(RolloutWorker).options(
            num_cpus=0,  # I/O-bound: W bounds the concurrency, not the CPUs (module docstring)
            scheduling_strategy="SPREAD",  # the slots over the cluster's nodes
            max_restarts=RESTARTS,
            max_task_retries=RESTARTS,
        )
        rng = random.Random(seed)
        self._actors = [
            worker.remote(task_spec, endpoint, rng.randrange(2**31)) for _ in range(self.workers)
        ]
        servers = [
            slot % endpoint.servers if endpoint.servers else None for slot in range(self.workers)
        ]
        try:
            answers = ray.get(
                [a.ready.remote(s) for a, s in zip(self._actors, servers, strict=True)]
            )
        except ray.exceptions.RayError as exc:
            first = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()[:1]
            raise PxnError(
                f"the Ray workers could not start ({type(exc).__name__}: {' '.join(first)}); "
                "every node needs the same gepa-pxn"
            ) from None
        self.nodes = [node for node, _ in answers]
        problems = [(node, problem) for node, problem in answers if problem is not None]
        if problems:
            node, problem = problems[0]
            raise PxnError(f"the Ray worker on node {node[:12]} {problem}")

    def meta(self) -> dict[str, Any]:
        """For run_start: which backend, which cluster, and the Ray node of each slot."""
        return {
            "eval_backend": "ray",
            "ray_address": self.address or "private local Ray",
            "ray_version": self._ray.__version__,
            "ray_nodes": self.nodes,
        }

    def run(
        self, requests: Sequence[RolloutRequest], clock: Callable[[], float], on_failure: OnFailure
    ) -> Iterator[tuple[int, int, RolloutOutcome]]:
        ray = self._ray
        # The anchor between this process's run clock and wall time, taken per stage
        # so the two clocks' rates cannot drift apart over a long run.
        wall0, run0 = time.time(), clock()
        todo = iter(enumerate(requests))
        free = list(range(self.workers - 1, -1, -1))  # idle slots (slot 0 first)
        flying: dict[Any, tuple[int, int, int | None, float]] = {}  # ref -> index, slot, ...

        def submit() -> None:
            while free:
                nxt = next(todo, None)
                if nxt is None:
                    return
                index, request = nxt
                slot, server = free.pop(), None
                if self._busy:  # the least busy local LM server, as litellm's Router picks it
                    server = min(range(len(self._busy)), key=self._busy.__getitem__)
                    self._busy[server] += 1
                submitted = clock()  # before the call: the rollout cannot start earlier
                ref = self._actors[slot].rollout.remote(request, server)
                flying[ref] = (index, slot, server, submitted)

        submit()
        try:
            while flying:
                ready, _ = ray.wait(list(flying), num_returns=1)
                index, slot, server, submitted = flying.pop(ready[0])
                outcome = ray.get(ready[0])
                received = clock()
                free.append(slot)
                if server is not None:
                    self._busy[server] -= 1
                submit()  # before recording: keep the slot busy

                def on_run_clock(wall: float, lo: float = submitted, hi: float = received) -> float:
                    return min(max(run0 + (wall - wall0), lo), hi)

                outcome.start = on_run_clock(outcome.start)
                outcome.end = on_run_clock(outcome.end, lo=outcome.start)
                for i, failed in enumerate(outcome.failed):
                    start = on_run_clock(failed.start)
                    outcome.failed[i] = replace(
                        failed, start=start, end=on_run_clock(failed.end, lo=start)
                    )
                    on_failure(slot, outcome.failed[i])
                yield index, slot, outcome
        finally:
            # Interrupted or failed: leave no rollout of ours queued on the workers.
            for ref, (_, _, server, _) in flying.items():
                ray.cancel(ref)
                if server is not None:
                    self._busy[server] -= 1

    def close(self) -> None:
        if self._ray is not None:
            for actor in self._actors:
                self._ray.kill(actor)
        self._actors = []
        self._connection.close()
        self._ray = None

    def __exit__(self, *exc: object) -> None:
        self.close()
