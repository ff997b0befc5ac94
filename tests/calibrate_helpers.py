"""Simulated traces with known truth: the fixtures calibration is tested against."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pxn.acceptance import Acceptance
from pxn.distribution import Distribution
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.trace import TraceWriter

# The truth the round trip must recover.
ROLLOUT = Distribution("gamma", params={"a": 3.0, "scale": 0.7})  # mean 2.1 s
REFLECTION = Distribution("lognorm", params={"s": 0.3, "scale": 9.0})  # median 9 s
TRUE = Scenario(
    name="truth",
    budget=2000,
    valset_size=20,
    trainset_size=50,
    workers=8,
    rollout=ROLLOUT,
    reflection=REFLECTION,
    acceptance=Acceptance(0.25),
    minibatch=3,
    reflection_concurrency=10,
    stage_overhead=0.2,
    skip_perfect=0.1,
    seed=11,
).validate()


def write_traces(
    directory: Path, scenario: Scenario, shape: Shape, replicates: range
) -> list[Path]:
    """One trace per replicate, as runs/NAME/trace.jsonl directories."""
    paths = []
    for r in replicates:
        run = directory / f"{shape}-r{r}"
        run.mkdir(parents=True)
        with TraceWriter(run / "trace.jsonl") as writer:
            simulate_once(scenario, shape, r, writer)
        paths.append(run)
    return paths


def relative(value: float, truth: float) -> float:
    return abs(value - truth) / abs(truth) if truth else math.inf


# ---- token counts: the simulator does not write them yet, so the fixtures do ----


@dataclass(frozen=True)
class TokenTruth:
    """Token counts to plant in simulated traces, and their effect on reflection latency.

    A reflection reads base + per_example * b tokens (with a normal spread) and
    takes `reflection_noise` seconds plus seconds_per_input_token and
    seconds_per_output_token times its counts; rollouts' counts are drawn apart
    from their latencies.
    """

    rollout_input: Distribution
    rollout_output: Distribution
    reflection_output: Distribution
    base: float
    per_example: float
    input_spread: float  # standard deviation of a reflection's input around the line
    reflection_noise: Distribution
    seconds_per_input_token: float = 0.0
    seconds_per_output_token: float = 0.0


TOKENS = TokenTruth(
    rollout_input=Distribution("gamma", params={"a": 20.0, "scale": 25.0}),  # mean 500
    rollout_output=Distribution("gamma", params={"a": 4.0, "scale": 30.0}),  # mean 120
    reflection_output=Distribution("lognorm", params={"s": 0.4, "scale": 300.0}),
    base=900.0,
    per_example=620.0,  # = a rollout's mean tokens in + out: gepa's record, as calibrate reads it
    input_spread=120.0,
    reflection_noise=Distribution("lognorm", params={"s": 0.3, "scale": 4.0}),
    seconds_per_input_token=0.002,
    seconds_per_output_token=0.01,
)

REFLECTION_POPULATION = 4000  # (latency, tokens) pairs a simulated reflection is drawn from


def write_token_traces(
    directory: Path,
    scenario: Scenario,
    truth: TokenTruth,
    shape: Shape,
    replicates: range,
    *,
    cost: float | None = 0.0,
) -> list[Path]:
    """Simulated traces whose rollouts and reflections report tokens (and `cost` per call).

    The simulator draws each reflection's latency from a population of pairs
    (latency, tokens) made by the truth: an empirical distribution of the
    latencies, whose value then names the tokens to write beside it. So a
    reflection's latency depends on its tokens as the truth says, and the trace
    stays as the simulator scheduled it.
    """
    rng = np.random.default_rng(scenario.seed + 1000 * scenario.minibatch)
    size = REFLECTION_POPULATION
    tokens_in = np.maximum(
        1,
        np.round(
            truth.base
            + truth.per_example * scenario.minibatch
            + rng.normal(0, truth.input_spread, size)
        ),
    )
    tokens_out = np.maximum(1, np.round(truth.reflection_output.sample(rng, size)))
    latency = (
        truth.reflection_noise.sample(rng, size)
        + truth.seconds_per_input_token * tokens_in
        + truth.seconds_per_output_token * tokens_out
    )
    order = np.argsort(latency)
    latency, tokens_in, tokens_out = latency[order], tokens_in[order], tokens_out[order]
    drawn = scenario.replace(reflection=Distribution("empirical", samples=tuple(latency.tolist())))
    paths = write_traces(directory, drawn, shape, replicates)

    rollout_in, rollout_out = counts(truth.rollout_input, rng), counts(truth.rollout_output, rng)

    def rollout_tokens(event: dict) -> None:
        event["tokens_in"], event["tokens_out"] = next(rollout_in), next(rollout_out)

    def reflection_tokens(event: dict) -> None:
        duration = event["end"] - event["start"]
        j = int(np.clip(np.searchsorted(latency, duration), 1, size - 1))
        j = j if abs(latency[j] - duration) < abs(latency[j - 1] - duration) else j - 1
        assert abs(latency[j] - duration) < 1e-6, "a simulated reflection's latency not drawn"
        event["tokens_in"], event["tokens_out"] = int(tokens_in[j]), int(tokens_out[j])

    for path in paths:
        rewrite_calls(path / "trace.jsonl", rollout_tokens, reflection_tokens, cost)
    return paths


def counts(distribution: Distribution, rng: np.random.Generator):
    """Whole token counts >= 1 drawn from the distribution, without end."""
    while True:
        yield from np.maximum(1, np.round(distribution.sample(rng, 4096))).astype(int).tolist()


def strip_tokens(paths: list[Path], cost: float | None = None) -> None:
    """Make the traces' calls report no token counts (as the simulator may one day write them)."""

    def none(event: dict) -> None:
        event["tokens_in"] = event["tokens_out"] = None

    for path in paths:
        rewrite_calls(path / "trace.jsonl", none, none, cost)


def rewrite_calls(trace: Path, rollout, reflection, cost: float | None) -> None:
    lines = []
    for line in trace.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["kind"] in ("rollout", "reflection"):
            (rollout if event["kind"] == "rollout" else reflection)(event)
            event["cost"] = cost
        lines.append(json.dumps(event))
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---- timeouts: the simulator writes no Attempt events, so the fixtures do ----

TIMEOUT_ERROR = "Timeout: litellm.Timeout: request timed out after the client's timeout"


def add_timeout_attempts(paths: list[Path], cap: float) -> int:
    """Write the Attempt events a runner would for simulated rollouts cut at a timeout.

    A rollout drawn with cap_retries lasts its timed-out tries (each exactly `cap`)
    plus its last try; one that timed out every time lasts a whole number of caps.
    Returns the number of tries written (backoff between tries is not modelled).
    """
    written = 0
    for path in paths:
        trace = path / "trace.jsonl"
        lines = []
        for line in trace.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["kind"] == "rollout":
                duration = event["end"] - event["start"]
                timeouts = math.floor(duration / cap + 1e-9)
                exhausted = timeouts > 0 and abs(duration - timeouts * cap) < 1e-9
                event["attempts"] = timeouts if exhausted else timeouts + 1
                for i in range(timeouts):
                    start = event["start"] + i * cap
                    attempt = {"kind": "attempt", "start": start, "end": start + cap,
                               "iteration": event["iteration"], "call": "rollout",
                               "phase": event["phase"], "worker": event["worker"],
                               "attempt": i + 1, "error": TIMEOUT_ERROR}  # fmt: skip
                    lines.append(json.dumps(attempt))
                    written += 1
            lines.append(json.dumps(event))
        trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written


# ---- untimed adapters: what the recorder writes when the adapter times no rollout ----


def untimed_copy(trace: Path, out: Path, *, workers: int | None = None) -> Path:
    """The simulated run as an adapter that times none of its rollouts would be recorded:
    each stage is one adapter call (a batch_evaluate, as gepa makes one per stage), and each
    of its rollouts spans it, untimed. `workers`: run_start's W (0: not declared)."""
    lines = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    spans: dict[tuple[int, str], list[float]] = {}
    for event in lines:
        if event["kind"] == "rollout":
            key = (event["iteration"], event["phase"])
            low, high = spans.get(key, [math.inf, -math.inf])
            spans[key] = [min(low, event["start"]), max(high, event["end"])]
    lanes: dict[tuple[int, str], int] = {}
    for event in lines:
        if event["kind"] == "rollout":
            key = (event["iteration"], event["phase"])
            event["start"], event["end"] = spans[key]
            event["worker"] = lanes[key] = lanes.get(key, -1) + 1
            event["timed"] = False
        if event["kind"] == "run_start" and workers is not None:
            event["workers"] = workers
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n", encoding="utf-8")
    return out
