"""A run gepa or dspy.GEPA tracked in MLflow: its metrics, each point with its wall-clock time.

gepa 0.1.4's tracker (`use_mlflow=True`) wraps the whole optimization in an MLflow run,
logs its config as params (`run_dir` among them) and its metrics with step = the
iteration, each stamped to the millisecond: at step 0 after the seed's validation; at
step i `selected_program_candidate` after the parents' minibatch, `subsample/*` after
the children's, `val_program_average` after each full validation. The run's start and
end give the wall-clock, the points mark the stages (stage_times.py). MLflow is an
optional extra, imported only here.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pxn.errors import PxnError

PREFIX = "mlflow:"
EXPERIMENT = "experiment:"  # mlflow:experiment:NAME, the experiment's latest run
GEPA_METRICS = ("total_metric_calls", "val_program_average")
READ = (
    *GEPA_METRICS,
    "best_score_on_valset",
    "selected_program_candidate",
    "subsample/before",
    "subsample/after",
    "new_program_idx",
    "iteration",
)
INSTALL = "reading an MLflow run needs MLflow: pip install 'gepa-pxn[mlflow]'"


@dataclass(frozen=True)
class Point:
    step: int
    value: float
    time: float  # seconds since the epoch


@dataclass(frozen=True)
class MlflowRun:
    run_id: str
    tracking_uri: str
    start: float  # seconds since the epoch
    end: float | None  # None while the run is open (or was killed)
    status: str
    params: dict[str, str]
    metrics: dict[str, tuple[Point, ...]]  # by key, in the order logged

    @property
    def run_dir(self) -> str | None:
        """The run_dir gepa logged in its config (None when it had none)."""
        value = self.params.get("run_dir")
        return None if value in (None, "", "None") else value

    def steps(self, *keys: str) -> dict[int, list[float]]:
        """The times of the keys' points, by step."""
        by_step: dict[int, list[float]] = defaultdict(list)
        for key in keys:
            for point in self.metrics.get(key, ()):
                by_step[point.step].append(point.time)
        return dict(by_step)

    @property
    def last_time(self) -> float:
        return max(p.time for points in self.metrics.values() for p in points)


def is_mlflow_reference(text: str) -> bool:
    return str(text).startswith(PREFIX)


def read_mlflow_run(reference: str, tracking_uri: str | None) -> MlflowRun:
    """The run `mlflow:RUN_ID` (or `mlflow:experiment:NAME`, its latest run) names, from the
    store at `tracking_uri` (else MLFLOW_TRACKING_URI); PxnError, one line, when it cannot be
    read or holds none of gepa's metrics."""
    what = f"MLflow run {reference}"
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise PxnError(
            f"is needed to read {reference}: give the store the run is in (sqlite:///mlflow.db, "
            "http://host:5000, ...), or set MLFLOW_TRACKING_URI",
            subject="tracking uri",
        )
    client, errors = _client(uri)
    name = reference[len(PREFIX) :]
    if not name:
        raise PxnError("names no run: write mlflow:RUN_ID or mlflow:experiment:NAME", subject=what)
    metrics: dict[str, tuple[Point, ...]] = {}
    try:
        run = client.get_run(_run_id(client, name, uri))
        for key in READ:
            if key in run.data.metrics:
                history = client.get_metric_history(run.info.run_id, key)
                metrics[key] = tuple(
                    Point(int(m.step), float(m.value), m.timestamp / 1000.0)
                    for m in sorted(history, key=lambda m: (m.timestamp, m.step))
                )
    except errors as exc:
        raise PxnError(f"cannot be read from {uri}: {_first_line(exc)}", subject=what) from None
    missing = [key for key in GEPA_METRICS if key not in metrics]
    if missing:
        held = ", ".join(sorted(run.data.metrics)[:4]) or "no metric at all"
        raise PxnError(
            f"holds none of gepa's metrics ({', '.join(missing)}; it holds {held}): not a run "
            "gepa tracked; give the run made with use_mlflow=True (gepa.optimize or dspy.GEPA)",
            subject=what,
        )
    info = run.info
    return MlflowRun(
        run_id=info.run_id,
        tracking_uri=uri,
        start=info.start_time / 1000.0,
        end=None if info.end_time is None else info.end_time / 1000.0,
        status=str(info.status),
        params=dict(run.data.params),
        metrics=metrics,
    )


def find_tracked_run(run_dir: Path, tracking_uri: str) -> str | None:
    """The id of the MLflow run gepa tracked with this run_dir, or None. gepa logs the run_dir
    as the run was given it (often relative to where it ran, and many runs' run_dirs share
    their last name: `runs/A/gepa`, `runs/B/gepa`), so of the runs whose run_dir has the same
    name, the one that names this very directory (absolute, or relative and ending as its
    path ends) wins, and otherwise the one whose path shares the longest ending with it
    (a copy of the run_dir elsewhere); the latest among equals."""
    client, errors = _client(tracking_uri)
    try:
        experiments = [e.experiment_id for e in client.search_experiments()]
        found = client.search_runs(
            experiments,
            filter_string=f"params.run_dir LIKE '%{run_dir.name}'",
            order_by=["attributes.start_time DESC"],
        )
    except errors as exc:
        raise PxnError(
            f"cannot be searched: {_first_line(exc)}", subject=f"MLflow store {tracking_uri}"
        ) from None
    here = run_dir.resolve()
    best, best_rank = None, (0, 0)
    for run in found:
        logged = Path(run.data.params["run_dir"])
        if logged.name != run_dir.name:
            continue
        if logged.is_absolute():
            same = logged.resolve() == here
            rank = (2, len(here.parts)) if same else (0, 0)
        else:
            shared = _shared_ending(logged.parts, here.parts)
            rank = (2 if shared == len(logged.parts) else 1, shared)
        if rank > best_rank:  # strictly: the latest among equals, runs come newest first
            best, best_rank = run.info.run_id, rank
    return best


def _shared_ending(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many trailing parts two paths have in common."""
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _client(uri: str) -> tuple[Any, type[Exception] | tuple[type[Exception], ...]]:
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
    except ImportError:
        raise PxnError(INSTALL) from None
    try:
        return MlflowClient(tracking_uri=uri), (MlflowException, OSError, ValueError)
    except (MlflowException, OSError, ValueError) as exc:
        raise PxnError(
            f"cannot be opened: {_first_line(exc)}", subject=f"MLflow store {uri}"
        ) from None


def _run_id(client: Any, name: str, uri: str) -> str:
    if not name.startswith(EXPERIMENT):
        return name
    experiment = client.get_experiment_by_name(name[len(EXPERIMENT) :])
    if experiment is None:
        raise PxnError(f"names no experiment in {uri}", subject=f"MLflow {PREFIX}{name}")
    runs = client.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1
    )
    if not runs:
        raise PxnError(f"holds no run in {uri}", subject=f"MLflow {PREFIX}{name}")
    return runs[0].info.run_id


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
