"""gepa as its docs lead with, recorded with the one line on the local LM: optimize_anything
and gepa.optimize(task_lm=...), singles calibrating, batched shapes predicted.

    .venv/bin/python experiments/optimize_anything/run.py           # record, then analyse
    .venv/bin/python experiments/optimize_anything/run.py record    # only the runs
    .venv/bin/python experiments/optimize_anything/run.py analyse   # calibrate, validate

`record` runs two user scripts, each wrapped in `with recording(out) as rec:
...(**rec.wrap(...))` and nothing else changed, each run on a local pool of its own (2
llama.cpp servers, SmolLM2-135M) started and stopped inside the machine's lock
(/tmp/lm.lock), so no other timed work shares the 2 cores with it:

- **oa**: `optimize_anything` in its generalization mode, optimizing the hint of the
  built-in topics prompt (pxn.runner.topic_task: its data, prompt and partial-credit
  metric) against an evaluator that calls the model through a litellm Router over both
  servers (least-busy); `EngineConfig(max_metric_calls=B, max_workers=2,
  sampling_strategy=PxNSampling(P, N), seed=S)`; the reflection LM a callable with
  batch_complete over the same Router, the task's small-model reflection template.
- **task_lm**: gepa's quick start, `gepa.optimize(task_lm="openai/smollm2",
  reflection_lm="openai/smollm2", ...)`, gepa's default adapter and its
  ContainsAnswerEvaluator, the topics as DefaultDataInst (the question in the input, the
  topic the answer); litellm reaches the task model through OPENAI_API_BASE (server 0),
  the reflection model through reflection_lm_kwargs (server 1).

Each at 1x1 (the singles, calibration's input) and at batched shapes, seeds 0-2; each
run's totals (RecordedRun) go to runs/NAME.json, its trace to runs/NAME/. A run already
recorded is kept (delete runs/ to redo); one cut short (a trace, no totals) is redone.
`analyse` calibrates one scenario per script from its singles only,
validates it against that script's batched runs, and writes summary.md.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PXN = Path(sys.executable).parent / "pxn"
LOCK = Path("/tmp/lm.lock")  # the machine's: one timed run at a time
BUDGET = 120
SEEDS = (0, 1, 2)
SHAPES = {"oa": ("1x1", "2x2", "4x1"), "task_lm": ("1x1", "2x2")}
QUESTION = "Which topic is this sentence about: music, weather, food or sports?"


def name(script: str, shape: str, seed: int) -> str:
    return f"{script}-{'single' if shape == '1x1' else shape}-s{seed}"


# ---- the two user scripts ----


class RouterLM:
    """A reflection LM over a litellm Router: one prompt, or all of an iteration's at once."""

    def __init__(self, router: Any):
        self.router = router

    def __call__(self, prompt: Any) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        reply = self.router.completion(
            model="smollm2", messages=messages, temperature=0.8, max_tokens=40
        )
        return reply.choices[0].message.content or ""

    def batch_complete(self, messages_list: list[Any]) -> list[str]:
        with ThreadPoolExecutor(max_workers=len(messages_list) or 1) as pool:
            return list(pool.map(self, messages_list))


def oa_run(out: Path, shape: str, seed: int, servers: list[str]) -> Any:
    import litellm
    from gepa.optimize_anything import (
        EngineConfig,
        GEPAConfig,
        ReflectionConfig,
        optimize_anything,
    )
    from gepa.strategies.proposal_sampling import PxNSampling

    from pxn.runner.record import recording
    from pxn.runner.topic_task import REFLECTION_TEMPLATE, make_topic_task, metric, program
    from pxn.runner.topic_task import record as what_reflection_sees

    router = litellm.Router(
        model_list=[
            {
                "model_name": "smollm2",
                "litellm_params": {"model": "openai/smollm2", "api_base": base, "api_key": "local"},
            }
            for base in servers
        ],
        routing_strategy="least-busy",
        num_retries=3,
    )

    def ask(messages: list[dict[str, str]]) -> str:
        reply = router.completion(model="smollm2", messages=messages, temperature=1.0, max_tokens=8)
        return reply.choices[0].message.content or ""

    def evaluate(candidate: dict[str, str], example: Any) -> tuple[float, dict[str, str]]:
        output = program(candidate, example, ask)
        fb = metric(example, output)
        return fb.score, what_reflection_sees(example, output, fb)

    task = make_topic_task()
    p, n = (int(x) for x in shape.split("x"))
    with recording(out, meta={"lm_servers": len(servers), "task": "topics"}) as rec:
        optimize_anything(
            **rec.wrap(
                seed_candidate=dict(task.seed_candidate),
                evaluator=evaluate,
                dataset=list(task.train),
                valset=list(task.val),
                config=GEPAConfig(
                    engine=EngineConfig(
                        max_metric_calls=BUDGET,
                        max_workers=2,
                        sampling_strategy=PxNSampling(p, n),
                        seed=seed,
                    ),
                    reflection=ReflectionConfig(
                        reflection_lm=RouterLM(router),
                        reflection_prompt_template=REFLECTION_TEMPLATE,
                        reflection_minibatch_size=3,
                    ),
                ),
            )
        )
    return rec.result


# A small model writes a usable system prompt only when shown one: gepa's template, shorter.
REFLECTION = (
    "Improve this system prompt for an assistant that names a sentence's topic: sports, "
    "food, weather or music.\n\nOld prompt: <curr_param>\n\nMistakes made with it:\n"
    "<side_info>\nWrite the new prompt between ``` and ```. Example:\n"
    "```\nAnswer with one lowercase word: sports, food, weather or music.\n```"
)


def task_lm_run(out: Path, shape: str, seed: int, servers: list[str]) -> Any:
    import gepa
    from gepa.strategies.proposal_sampling import PxNSampling

    from pxn.runner.record import recording
    from pxn.runner.topic_task import make_topic_task

    def data(examples: Any) -> list[dict[str, Any]]:
        return [
            {"input": f"{e.sentence}\n{QUESTION}", "additional_context": {}, "answer": e.topic}
            for e in examples
        ]

    task = make_topic_task()
    os.environ["OPENAI_API_BASE"] = servers[0]  # where litellm finds the task model
    os.environ["OPENAI_API_KEY"] = "local"
    p, n = (int(x) for x in shape.split("x"))
    with recording(out, meta={"lm_servers": 1, "task": "topics"}) as rec:
        gepa.optimize(
            **rec.wrap(
                seed_candidate={"system_prompt": "Answer with the topic, one lowercase word."},
                trainset=data(task.train),
                valset=data(task.val),
                task_lm="openai/smollm2",
                reflection_lm="openai/smollm2",
                reflection_lm_kwargs={
                    "api_base": servers[1],
                    "api_key": "local",
                    "temperature": 0.8,
                    "max_tokens": 40,
                },
                reflection_prompt_template=REFLECTION,
                max_metric_calls=BUDGET,
                sampling_strategy=PxNSampling(p, n),
                seed=seed,
            )
        )
    return rec.result


SCRIPTS = {"oa": oa_run, "task_lm": task_lm_run}


@contextmanager
def machine_lock() -> Iterator[None]:
    """The machine's LM lock, held for one run and its pool's whole life."""
    with LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def record() -> None:
    from pxn.runner.lm_pool import LMPool

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    runs = HERE / "runs"
    runs.mkdir(exist_ok=True)
    for seed in SEEDS:
        for script, shapes in SHAPES.items():
            for shape in shapes:
                run = name(script, shape, seed)
                done = runs / f"{run}.json"
                if done.exists():
                    continue
                shutil.rmtree(runs / run, ignore_errors=True)  # a run cut short is redone
                with machine_lock(), LMPool(2, log_dir=runs / "lm-logs", remove_logs=True) as pool:
                    servers = [s.api_base for s in pool.servers]
                    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                    print(f"{run}: start {time.strftime('%H:%M:%S', time.gmtime())} UTC, "
                          f"load {load}", flush=True)  # fmt: skip
                    result = SCRIPTS[script](runs / run, shape, seed, servers)
                done.write_text(json.dumps(asdict(result), indent=2) + "\n")
                print(f"{run}: {result.status}, {result.metric_calls} metric calls, "
                      f"{result.wall_clock_s:.0f} s, mismatches {list(result.mismatches)}",
                      flush=True)  # fmt: skip


# ---- analysis ----


def pxn(output: str, *args: str) -> None:
    """A pxn command from the repository root, its output kept beside it."""
    done = subprocess.run([str(PXN), *args], cwd=ROOT, capture_output=True, text=True)
    (HERE / output).write_text(done.stdout + done.stderr)
    print(done.stdout + done.stderr)
    done.check_returncode()


def recorded(script: str, shape: str) -> list[str]:
    """The script's runs at this shape that were recorded to the end, from the root."""
    here = HERE.relative_to(ROOT)
    runs = [name(script, shape, seed) for seed in SEEDS]
    return [str(here / "runs" / run) for run in runs if (HERE / "runs" / f"{run}.json").exists()]


def analyse() -> None:
    """Per script: a scenario from its singles only; every run, singles included, against it."""
    here = HERE.relative_to(ROOT)
    for script, shapes in SHAPES.items():
        singles = recorded(script, "1x1")
        batched = [run for shape in shapes[1:] for run in recorded(script, shape)]
        scenario = str(here / f"{script}.toml")
        pxn(f"calibrate-{script}.txt", "calibrate", *singles, "-o", scenario)
        pxn(f"validation-{script}.txt", "validate", "--scenario", scenario, *singles, *batched,
            "--reps", "400", "--out", str(here / f"validation-{script}"))  # fmt: skip
    summarise()


Row = dict[str, str]


def summarise() -> None:
    """summary.md: per script and shape, wall-clock and best score against their predictions,
    then run by run."""
    lines = ["| runs | shape | n | wall-clock MAPE | inside | width | best score error | "
             "inside | width |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    table = ["| run | wall-clock | predicted [5-95%] | best score | predicted [5-95%] |",
             "|---|---|---|---|---|"]  # fmt: skip
    for script, shapes in SHAPES.items():
        with (HERE / f"validation-{script}" / "validation.csv").open() as f:
            rows = [r for r in csv.DictReader(f) if r["status"] == "completed"]
        groups = {"single (own)": [r for r in rows if r["shape"] in ("1x1", "single")]}
        groups |= {shape: [r for r in rows if r["shape"] == shape] for shape in shapes[1:]}
        groups["batched"] = [r for r in rows if r["shape"] in shapes[1:]]
        for label, group in groups.items():
            if group:
                lines.append(f"| {script} | {label} | {len(group)} | {figures(group)} |")
        table += [run_line(r) for r in rows]
    text = "\n".join([*lines, "", *table]) + "\n"
    (HERE / "summary.md").write_text(text)
    print(text)


def num(r: Row, key: str) -> float:
    return float(r[key]) if r[key] not in ("", "None", "nan") else float("nan")


def run_line(r: Row) -> str:
    return (
        f"| {Path(r['run']).parent.name} | {num(r, 'measured_wall_clock_s'):.0f} s "
        f"| {num(r, 'sim_wall_clock_mean_s'):.0f} [{num(r, 'sim_wall_clock_p5_s'):.0f}, "
        f"{num(r, 'sim_wall_clock_p95_s'):.0f}] | {num(r, 'measured_best_score'):.3f} "
        f"| {num(r, 'sim_best_score_mean'):.3f} [{num(r, 'sim_best_score_p5'):.3f}, "
        f"{num(r, 'sim_best_score_p95'):.3f}] |"
    )


def figures(rows: list[Row]) -> str:
    """Wall-clock MAPE, coverage and median width over the mean; best score's mean error,
    coverage and median width."""
    mape = statistics.mean(abs(num(r, "sim_error")) for r in rows)
    inside = sum(r["inside_interval"] == "True" for r in rows)
    width = statistics.median(
        (num(r, "sim_wall_clock_p95_s") - num(r, "sim_wall_clock_p5_s"))
        / num(r, "sim_wall_clock_mean_s")
        for r in rows
    )
    scored = [r for r in rows if r["best_score_inside"] in ("True", "False")]
    if not scored:
        return f"{mape:.1%} | {inside}/{len(rows)} | {width:.0%} | - | - | -"
    error = statistics.mean(
        abs(num(r, "sim_best_score_mean") - num(r, "measured_best_score")) for r in scored
    )
    best_inside = sum(r["best_score_inside"] == "True" for r in scored)
    best_width = statistics.median(
        num(r, "sim_best_score_p95") - num(r, "sim_best_score_p5") for r in scored
    )
    return (
        f"{mape:.1%} | {inside}/{len(rows)} | {width:.0%} | {error:.3f} | "
        f"{best_inside}/{len(scored)} | {best_width:.2f}"
    )


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else "all"
    if step not in ("record", "analyse", "summarise", "all"):
        raise SystemExit("usage: run.py [record|analyse|summarise|all]")
    if step in ("record", "all"):
        record()
    if step in ("analyse", "all"):
        analyse()
    if step == "summarise":
        summarise()
