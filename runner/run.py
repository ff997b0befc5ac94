"""`run_gepa(config)`: one real batched GEPA run, traced event by event.

Nothing is written before the run can start: inputs validated, the local LM pool
started unless models were given, both models probed. `run_engine` then runs gepa
(gepa.optimize or optimize_anything) with pxn's parts under the public recording, as
any user's run, and scores the best candidate on the test split; it takes any
`ChatModel`, so `pxn conformance`'s synthetic models run the same path. gepa's state
lives in runs/NAME/gepa, so `resume=True` continues an interrupted run into the same
trace, the test split's scoring being its last step.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import litellm
from gepa.core.result import GEPAResult
from gepa.core.state import GEPAState

from pxn.errors import PxnError
from pxn.files import write_text_atomically
from pxn.runner.adapter import (
    InstrumentedAdapter,
    RolloutPool,
    ThreadRollouts,
    score_split,
    wrap_split,
)
from pxn.runner.config import Plan, RunConfig, check_out, plan
from pxn.runner.gepa_loop import TaskEvaluator, run_gepa_optimize, run_optimize_anything
from pxn.runner.lm import ChatModel, LMClient
from pxn.runner.lm_pool import LMPool, PoolInfo, running_pool
from pxn.runner.record import (
    RecordedRun,
    Recording,
    RunFinished,
    check_resumable,
    completed_run,
    recording,
)
from pxn.runner.redact import redact
from pxn.runner.reflection import InstrumentedReflectionLM
from pxn.runner.retry import RetryPolicy
from pxn.runner.waits import PROBE_TIMEOUT, on_stderr, quiet
from pxn.trace_reading import read_trace

# Imported for its side effect: litellm's import takes seconds, and done lazily inside
# the first call it would be timed as that call's latency.
_ = litellm


@dataclass
class RunResult:
    out: Path
    status: str  # completed | failed | interrupted
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _versions(task_lm: ChatModel, reflection_lm: ChatModel) -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return {
        "gepa": version("gepa"),
        "litellm": version("litellm"),
        "gepa-pxn": version("gepa-pxn"),
        "llama-cpp-python": version("llama_cpp_python"),
        "python": sys.version.split()[0],
        "task_lm": task_lm.label,
        "reflection_lm": reflection_lm.label,
    }


def run_gepa(
    config: RunConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    pool: PoolInfo | None = None,
    probe_timeout: float = PROBE_TIMEOUT,
) -> RunResult:
    """Run gepa for real; `pool` reuses a running local pool instead of starting one;
    each model must answer its probe within `probe_timeout` seconds."""
    out = Path(config.out)
    if resume:
        config = _load_config(out, config.progress)
        try:  # before any LM pool starts or model is probed: nothing changes
            check_resumable(out)
        except RunFinished as finished:
            if (out / "result.json").exists():
                return RunResult(out=out, status="finished", message=finished.problem)
            _check_saved_state(out)  # only the test split's scoring is left
    if not overwrite:
        check_out(config, resume)
    pl = plan(config)
    policy = RetryPolicy(max_attempts=config.max_attempts, timeout=config.timeout)
    tell = on_stderr if config.progress else quiet  # what the run waits for, on stderr

    with ExitStack() as stack:
        # A supervisor's SIGTERM ends the run as Ctrl-C does: servers stopped, trace closed.
        stack.enter_context(sigterm_as_interrupt())
        rollouts = None
        if config.eval_backend == "ray":
            from pxn.runner.ray_pool import RayRollouts

            # Connected first: an unreachable head fails before the LM pool starts.
            rollouts = stack.enter_context(RayRollouts(config.workers, config.ray_address))
        if pool is None and (config.task_lm is None or config.reflection_lm is None):
            # A running `pxn lm serve` pool, else one for this run (its logs stay with it).
            pool = running_pool() or stack.enter_context(
                LMPool(config.servers, log_dir=out / "lm-logs", tell=tell)
            )
        task_client, refl_client = _probed_clients(config, pool, policy, probe_timeout, tell)
        if rollouts is not None:
            from pxn.runner.ray_pool import Endpoint

            # The Ray workers build their own task LM client from this (no key in it).
            endpoint = Endpoint(
                task_client.model,
                policy,
                pool=None if config.task_lm else pool,
                api_base=config.api_base,
                probe_timeout=probe_timeout,
            )
            rollouts.start(config.task, endpoint, config.seed)
        # Calibration models the pool's capacity when every call goes through it.
        on_pool = pool is not None and config.task_lm is None and config.reflection_lm is None
        lm_servers = len(pool.servers) if on_pool else None
        # The run really starts here: only now is anything written under --out.
        return run_engine(
            config,
            pl,
            task_client,
            refl_client,
            resume=resume,
            overwrite=overwrite,
            lm_servers=lm_servers,
            rollouts=rollouts,
        )


def _probed_clients(
    config: RunConfig,
    pool: PoolInfo | None,
    policy: RetryPolicy,
    probe_timeout: float,
    tell: Callable[[str], None],
) -> tuple[LMClient, LMClient]:
    """The task's and the reflection's LM clients, each probed once."""
    clients = []
    for model, role, seed in (
        (config.task_lm, "task", config.seed),
        (config.reflection_lm, "reflection", config.seed + 1),
    ):
        client = LMClient(
            model or (pool.model if pool else ""),
            pool=None if model else pool,
            api_base=config.api_base,
            policy=policy,
            seed=seed,
        )
        client.probe(role, probe_timeout, tell)
        clients.append(client)
    return clients[0], clients[1]


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the run lasts (main thread only), unless
    the caller handles SIGTERM already (a pxn command that runs gepa, as conformance does,
    turns it into its own interrupt and must still know it was SIGTERM)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not in_main_thread or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check_saved_state(out: Path) -> None:
    if not (out / "gepa" / "gepa_state.bin").exists():
        raise PxnError(
            f"{out} finished gepa's loop, but gepa's saved state (gepa/gepa_state.bin), which "
            "holds the candidate to score on the test split, is gone",
            subject="run directory",
        )


def _load_config(out: Path, progress: bool) -> RunConfig:
    path = out / "config.json"
    if not (out / "trace.jsonl").exists() or not path.exists():
        raise PxnError(f"{out} holds no run to resume (no trace.jsonl/config.json)")
    try:
        config = RunConfig(**json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        raise PxnError(f"{path} is not a config this pxn can resume ({exc})") from None
    config.out = str(out)
    config.progress = progress
    return config


def run_engine(
    config: RunConfig,
    pl: Plan,
    task_client: ChatModel,
    refl_client: ChatModel,
    *,
    resume: bool = False,
    overwrite: bool = False,
    lm_servers: int | None = None,
    rollouts: RolloutPool | None = None,
    meta: dict[str, Any] | None = None,
) -> RunResult:
    """Run gepa on `pl.task` with these models into config.out, inputs checked already;
    `rollouts` default to config.workers threads; `meta` joins run_start's."""
    task = pl.task
    versions = _versions(task_client, refl_client)
    pool = rollouts if rollouts is not None else ThreadRollouts(task, task_client, config.workers)
    finish = partial(_finish, config, pl, pool, wrap_split("test", task.test), versions)
    end = read_trace(Path(config.out) / "trace.jsonl").run_end if resume else None
    if end is not None and end.status == "completed":
        # Interrupted after gepa's loop completed: gepa's result and the whole run's totals
        # as that session had them (its saved state, its trace), the test split scored now.
        try:
            state = GEPAState.load(str(Path(config.out) / "gepa"))
            run = completed_run(config.out, state)
            done = "gepa's loop had completed: the best candidate was scored on the test split now"
            return finish(GEPAResult.from_state(state), run, done)
        finally:
            pool.close()
    rec = recording(
        config.out,
        workers=config.workers,
        reflection_concurrency=pl.reflection_concurrency,
        resume=resume,
        overwrite=overwrite,
        max_reflection_failures=pl.max_failures,
        meta={
            "task": task.name,
            **versions,
            **({} if lm_servers is None else {"lm_servers": lm_servers}),
            **pool.meta(),
            **({} if pl.budget_from is None else {"budget_from": pl.budget_from}),
            **(meta or {}),
        },
    )
    reflection = InstrumentedReflectionLM(
        refl_client, rec, pl.reflection_concurrency, task.reflection_lm_kwargs
    )
    if config.api == "optimize_anything":
        evaluator = TaskEvaluator(task, task_client, rec)
        loop = partial(run_optimize_anything, config, pl, rec, evaluator, reflection)
    else:
        adapter = InstrumentedAdapter(task, rec, pool)
        loop = partial(run_gepa_optimize, config, pl, rec, adapter, reflection)
    try:
        return _record(config, rec, loop, finish)
    finally:
        pool.close()
        reflection.close()


def _record(
    config: RunConfig,
    rec: Recording,
    run_gepa_loop: Callable[[], Any],
    finish: Callable[[Any, RecordedRun], RunResult],
) -> RunResult:
    """gepa under the recording (`run_gepa_loop` wraps its arguments and runs it), then
    result.json from what it recorded."""
    out = rec.out
    # Interrupted, a bug (not bad input: keep its traceback) or a refusal before the run
    # raises on, in run_end by then when the run had started.
    with rec:
        if not rec.resuming:
            out.mkdir(parents=True, exist_ok=True)
            text = json.dumps(asdict(config), indent=2)
            (out / "config.json").write_text(text, encoding="utf-8")
        gepa_result = run_gepa_loop()
    run = rec.result
    if run is None:
        raise RuntimeError("the run did not start")
    if gepa_result is None or run.status != "completed":
        return RunResult(out=out, status=run.status, message=run.message)
    return finish(gepa_result, run)


def _finish(
    config: RunConfig,
    pl: Plan,
    pool: RolloutPool,
    test: list[Any],
    versions: dict[str, str],
    gr: Any,
    run: RecordedRun,
    message: str = "",
) -> RunResult:
    """result.json: the whole run's totals (the trace's, checked against gepa's), the best
    candidate, and its score on the test split."""
    out = Path(config.out)
    best = gr.best_candidate
    # The test split is scored after gepa's loop, outside the trace (it is no metric
    # call of gepa's); its time is reported apart so no one takes it for overhead.
    test_start = time.perf_counter()
    try:
        test_score = score_split(pool, best, test) if test else None
    except KeyboardInterrupt:  # the trace is complete; result.json waits for a resume
        return RunResult(
            out=out,
            status="interrupted",
            message="while the test split was scored, after gepa's loop completed: resuming "
            "the run scores it and writes result.json",
        )
    test_eval_s = time.perf_counter() - test_start
    warnings = [f"trace mismatch: {m}" for m in run.mismatches]
    if run.unfenced_replies:
        warnings.append(
            f"{run.unfenced_replies} reflection replies had no ``` pair: gepa took "
            "each whole reply as the new text (see fenced=false in the trace)"
        )
    result = {
        "task": pl.task.name,
        "shape": f"{pl.p}x{pl.n}",
        "budget": pl.budget,
        "workers": config.workers,
        "best_candidate": best,
        "best_candidate_index": gr.best_idx,
        "best_val_score": gr.val_aggregate_scores[gr.best_idx],
        "seed_val_score": gr.val_aggregate_scores[0],
        "test_score": None if test_score is None or math.isnan(test_score) else test_score,
        "iterations": run.iterations,
        "proposals": run.proposals,
        "accepted": run.accepted,
        "merges": run.merges,
        "merges_accepted": run.merges_accepted,
        "metric_calls": run.metric_calls,
        "full_val_evals": run.full_val_evals,
        "reflection_calls": run.reflection_calls,
        "reflections_without_fences": run.unfenced_replies,
        "wall_clock_s": run.wall_clock_s,  # to the last traced event: gepa's loop only
        "test_eval_s": round(test_eval_s, 3),
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost_usd": run.cost,
        "trace_check": list(run.mismatches) or "ok",
        "versions": versions,
    }
    text = redact(json.dumps(result, indent=2))
    # Whole or not at all: a resume takes a result.json as the sign the run is finished.
    write_text_atomically(out / "result.json", text + "\n")
    return RunResult(out=out, status=run.status, message=message, result=result, warnings=warnings)
