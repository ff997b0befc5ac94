"""`run_gepa(config)`: one real batched GEPA run, traced event by event.

Flow: validate every input (nothing is written before the run can start) ->
start the local LM pool unless models were given -> probe both LMs once ->
`run_engine`: create runs/NAME with config.json and trace.jsonl ->
gepa.optimize with PxNSampling(p, n), the instrumented adapter and reflection
LM, the recorder as callbacks -> score the best candidate on the test split ->
result.json -> check the trace's totals against gepa's -> run_end.

`run_engine` takes the task and both models as given, so the same engine and
recording path run on any `ChatModel`: the real clients here, the synthetic
ones of synthetic.py (`pxn conformance`).

gepa's own state lives in runs/NAME/gepa (its run_dir), so `resume=True`
continues an interrupted run into the same trace.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import math
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gepa  # imported before any timing starts, as litellm is below
import litellm
from gepa.core.state import GEPAState
from gepa.strategies.proposal_sampling import PxNSampling

from pxn.errors import PxnError
from pxn.runner.adapter import InstrumentedAdapter, RolloutPool, wrap_split
from pxn.runner.checks import mismatches, trace_totals
from pxn.runner.config import Plan, RunConfig, check_out, make_selection, plan
from pxn.runner.lm import ChatModel, LMClient
from pxn.runner.lm_pool import LMPool, PoolInfo, running_pool
from pxn.runner.progress import LiveProgress
from pxn.runner.recorder import Recorder, RecordingSelection, Stopper, perf_clock
from pxn.runner.redact import describe_error, redact
from pxn.runner.reflection import InstrumentedReflectionLM
from pxn.runner.retry import CallFailed, RetryPolicy
from pxn.trace import Decision, Resume, RunEnd, RunStart, TraceWriter, read_trace

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


def _probe(client: LMClient, role: str) -> None:
    """One tiny call before anything is written: an unreachable model is bad input."""
    try:
        client.complete(
            [{"role": "user", "content": "Say ok."}],
            clock=lambda: 0.0,
            on_failure=lambda f: None,
            max_tokens=1,
        )
    except CallFailed as exc:
        raise PxnError(
            f"the {role} model {client.model} cannot be reached ({exc.error}); "
            "check the model name, the API base URL and the key in the environment"
        ) from None


def _prepare_trace(path: Path) -> float:
    """For a resume: drop a torn last line (a kill mid-write) and return the last event's
    end time, so the resumed run's clock continues from it."""
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(raw.rfind(b"\n") + 1)
    trace = read_trace(path)
    return max(e.end for e in trace.events)


def run_gepa(config: RunConfig, *, resume: bool = False, pool: PoolInfo | None = None) -> RunResult:
    """Run gepa for real; `pool` reuses a running local pool instead of starting one."""
    out = Path(config.out)
    if resume:
        config = _load_config(out, config.progress)
    check_out(config, resume)
    pl = plan(config)
    policy = RetryPolicy(max_attempts=config.max_attempts, timeout=config.timeout)

    with ExitStack() as stack:
        # A supervisor's SIGTERM ends the run as Ctrl-C does: servers stopped, trace closed.
        stack.enter_context(sigterm_as_interrupt())
        rollouts = None
        if config.eval_backend == "ray":
            from pxn.runner.ray_pool import RayRollouts

            # Connected first: an unreachable head fails before the LM pool starts.
            rollouts = stack.enter_context(RayRollouts(config.workers, config.ray_address))
        needs_pool = config.task_lm is None or config.reflection_lm is None
        if pool is None and needs_pool:
            pool = running_pool()  # a `pxn lm serve` pool, if one is up
        if pool is None and needs_pool:
            log_dir = Path(tempfile.mkdtemp(prefix="pxn-lm-pool-"))
            pool = stack.enter_context(LMPool(config.servers, log_dir=log_dir))
        task_client = LMClient(
            config.task_lm or (pool.model if pool else ""),
            pool=None if config.task_lm else pool,
            api_base=config.api_base,
            policy=policy,
            seed=config.seed,
        )
        refl_client = LMClient(
            config.reflection_lm or (pool.model if pool else ""),
            pool=None if config.reflection_lm else pool,
            api_base=config.api_base,
            policy=policy,
            seed=config.seed + 1,
        )
        _probe(task_client, "task")
        _probe(refl_client, "reflection")
        if rollouts is not None:
            from pxn.runner.ray_pool import Endpoint

            # The Ray workers build their own task LM client from this (no key in it).
            endpoint = Endpoint(
                task_client.model,
                policy,
                pool=None if config.task_lm else pool,
                api_base=config.api_base,
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
            lm_servers=lm_servers,
            rollouts=rollouts,
        )


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the run lasts (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    lm_servers: int | None = None,
    rollouts: RolloutPool | None = None,
    meta: dict[str, Any] | None = None,
) -> RunResult:
    """Run gepa on `pl.task` with these models into config.out; `meta` joins run_start's.

    The inputs are checked already (plan, check_out); `rollouts` is where rollouts
    run (default: config.workers threads of this process).
    """
    task = pl.task
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    gepa_dir = out / "gepa"
    trace_path = out / "trace.jsonl"
    offset = 0.0
    saved: GEPAState | None = None
    if resume:
        offset = _prepare_trace(trace_path)
        if (gepa_dir / "gepa_state.bin").exists():
            saved = GEPAState.load(str(gepa_dir))
    else:
        (out / "config.json").write_text(json.dumps(asdict(config), indent=2), encoding="utf-8")
    clock = perf_clock(offset)
    writer = TraceWriter(trace_path, append=resume)
    recorder = Recorder(writer, clock, max_failures=pl.max_failures)
    adapter = InstrumentedAdapter(task, task_client, recorder, config.workers, rollouts)
    reflection = InstrumentedReflectionLM(
        refl_client, recorder, pl.reflection_concurrency, task.reflection_lm_kwargs
    )
    train, val, test = (
        wrap_split("train", task.train),
        wrap_split("val", task.val),
        wrap_split("test", task.test),
    )
    versions = _versions(task_client, refl_client)
    if resume:
        completed = saved.i + 1 if saved is not None else -1
        used = saved.total_num_evals if saved is not None else 0
        now = clock()
        recorder.write(Resume(start=now, end=now, iteration=completed, metric_calls=used))
        # gepa evaluates the seed again on resume, then discards it for the saved state.
        adapter.skip_seed_val = saved is not None
    else:
        recorder.write(
            RunStart(
                start=0.0,
                end=0.0,
                source="runner",
                shape=f"{pl.p}x{pl.n}",
                budget=config.budget,
                workers=config.workers,
                reflection_concurrency=pl.reflection_concurrency,
                valset_size=len(val),
                trainset_size=len(train),
                minibatch=task.minibatch,
                seed=config.seed,
                started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                meta={
                    "task": task.name,
                    "selection": config.selection,
                    **versions,
                    **({} if lm_servers is None else {"lm_servers": lm_servers}),
                    **adapter.pool.meta(),
                    **(meta or {}),
                },
            )
        )

    status, message = "completed", ""
    error: BaseException | None = None
    gepa_result = None
    progress = LiveProgress(
        recorder,
        config.budget,
        lambda: max(recorder.metric_calls, adapter.rollouts),
        enabled=config.progress,
    )
    try:
        with progress:
            gepa_result = gepa.optimize(
                seed_candidate=dict(task.seed_candidate),
                trainset=train,
                valset=val,
                adapter=adapter,
                reflection_lm=reflection,
                reflection_prompt_template=task.reflection_prompt_template,
                reflection_minibatch_size=task.minibatch,
                sampling_strategy=PxNSampling(pl.p, pl.n),
                selection_strategy=RecordingSelection(make_selection(config.selection), recorder),
                candidate_selection_strategy="pareto",
                max_metric_calls=config.budget,
                stop_callbacks=[Stopper(recorder)],
                callbacks=[recorder],
                run_dir=str(gepa_dir),
                # gepa 0.1.4 keys its cache by example position, so validation lookups would hit
                # train rollouts: off.
                cache_evaluation=False,
                use_merge=False,
                raise_on_exception=True,
                display_progress_bar=False,
                logger=GepaLog(gepa_dir / "run_log.txt"),
                seed=config.seed,
            )
        if recorder.stop_reason:
            status, message = "failed", recorder.stop_reason
    except KeyboardInterrupt:
        status, message = "interrupted", "interrupted by the user (Ctrl-C)"
    except Exception as exc:  # recorded in run_end, then re-raised below with its traceback
        status, message, error = "failed", describe_error(exc), exc
    # The run's wall-clock is gepa's loop: the test-set scoring below is not part of it.
    loop_end = clock()

    result: dict[str, Any] = {}
    warnings: list[str] = []
    try:
        if gepa_result is not None:
            result, warnings = _finish(
                config, pl, out, gepa_result, adapter, reflection, recorder, test, versions
            )
            if recorder.fenced_missing:
                warnings.append(
                    f"{recorder.fenced_missing} reflection replies had no ``` pair: gepa took "
                    "each whole reply as the new text (see fenced=false in the trace)"
                )
    except KeyboardInterrupt:
        status, message = "interrupted", "interrupted by the user (Ctrl-C)"
    except Exception as exc:
        status, message, error = "failed", describe_error(exc), exc
    finally:
        adapter.close()
        reflection.close()
        recorder.write(
            RunEnd(
                start=loop_end,
                end=loop_end,
                status=status,
                metric_calls=gepa_result.total_metric_calls
                if gepa_result
                else recorder.metric_calls,
                iterations=recorder.iterations,
                message=redact(message),
            )
        )
        recorder.close()
    if status == "interrupted":
        raise KeyboardInterrupt
    if error is not None:  # a bug, not bad input: keep its traceback
        raise error
    return RunResult(out=out, status=status, message=message, result=result, warnings=warnings)


def _finish(
    config: RunConfig,
    pl: Plan,
    out: Path,
    gr: Any,
    adapter: InstrumentedAdapter,
    reflection: InstrumentedReflectionLM,
    recorder: Recorder,
    test: list[Any],
    versions: dict[str, str],
) -> tuple[dict[str, Any], list[str]]:
    best = gr.best_candidate
    # The test split is scored after gepa's loop, outside the trace (it is no metric
    # call of gepa's); its time is reported apart so no one takes it for overhead.
    test_start = recorder.clock()
    test_score = adapter.score(best, test) if test else None
    test_eval_s = recorder.clock() - test_start
    trace = read_trace(out / "trace.jsonl")
    totals = trace_totals(trace)
    accepted = gr.num_candidates - 1
    warnings = [
        f"trace mismatch: {m}"
        for m in mismatches(
            totals,
            metric_calls=gr.total_metric_calls,
            full_val_evals=gr.num_full_val_evals,
            accepted=accepted,
            workers=config.workers,
        )
    ]
    cost = None
    if adapter.cost is not None or reflection._cost is not None:
        cost = (adapter.cost or 0.0) + (reflection._cost or 0.0)
    wall = max(e.end for e in trace.events)
    result = {
        "task": pl.task.name,
        "shape": f"{pl.p}x{pl.n}",
        "budget": config.budget,
        "workers": config.workers,
        "best_candidate": best,
        "best_candidate_index": gr.best_idx,
        "best_val_score": gr.val_aggregate_scores[gr.best_idx],
        "seed_val_score": gr.val_aggregate_scores[0],
        "test_score": None if test_score is None or math.isnan(test_score) else test_score,
        "iterations": recorder.iterations,
        "proposals": len(trace.live(Decision)),
        "accepted": accepted,
        "metric_calls": gr.total_metric_calls,
        "full_val_evals": gr.num_full_val_evals,
        "reflection_calls": reflection.calls,
        "reflections_without_fences": recorder.fenced_missing,
        "wall_clock_s": round(wall, 3),  # to the last traced event: gepa's loop only
        "test_eval_s": round(test_eval_s, 3),
        "tokens_in": adapter.tokens_in + reflection.total_tokens_in,
        "tokens_out": adapter.tokens_out + reflection.total_tokens_out,
        "cost_usd": cost,
        "trace_check": warnings or "ok",
        "versions": versions,
    }
    text = redact(json.dumps(result, indent=2))
    (out / "result.json").write_text(text + "\n", encoding="utf-8")
    return result, warnings


class GepaLog:
    """gepa's log, to a file only (its default logger also prints), every line redacted."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def log(self, message: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(redact(str(message)) + "\n")
