"""Are the simulator's results the same to the bit as another version's?

    .venv/bin/python experiments/bench/check_identical.py --write before.pickle
    (change the code, or run another checkout with PYTHONPATH pointing at it)
    .venv/bin/python experiments/bench/check_identical.py --compare before.pickle

A speed-up must not move any simulated figure. This records what the
simulator and the scenario code give on many cases and compares two such
records: every replicate's RunSummary (floats compared exactly; a field or a
stage added since, which the run never entered, is new information), a few
replicates' whole traces (all but run_start's schema version), the
predictions and closed forms of a sweep, every parameter draw of both presets
applied to its scenario, each distribution's mean, and the messages of
scenarios and draws that must be refused.

Cases: both presets (their parameter draws, tokens and prices), the advise
example (provider limits), bench_sim's no_effect and every_effect (with and
without its limits), bench_cli's every effect on the livebench-math preset
(with and without limits), and the tests' EVERYTHING and rate-limited
scenarios; at several shapes each.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import json
import math
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the test scenarios
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' scenarios

import bench_cli  # noqa: E402
import bench_sim  # noqa: E402
from sim_helpers import EVERYTHING  # noqa: E402
from test_sim_cost_limits import LIMITED  # noqa: E402

from pxn.errors import PxnError  # noqa: E402
from pxn.rate_limits import RateLimits  # noqa: E402
from pxn.scenario import Scenario  # noqa: E402
from pxn.shape import Shape  # noqa: E402
from pxn.sim.analytic import analytic  # noqa: E402
from pxn.sim.model import simulate_once  # noqa: E402
from pxn.sim.predict import simulated_acceptance, sweep  # noqa: E402
from pxn.sim.presets import load_scenario  # noqa: E402
from pxn.trace import TraceWriter  # noqa: E402

SHAPES = [Shape(1, 1), Shape(2, 2), Shape(8, 2), Shape(4, 4)]
TRACED = 2  # replicates per case whose whole trace is compared


def scenarios(tmp: Path) -> dict[str, Scenario]:
    every_preset = load_scenario(str(bench_cli.every_effect(tmp / "every.toml")))
    every = bench_sim.every_effect()
    cases = {
        "livebench-math": load_scenario("livebench-math"),
        "hover": load_scenario("hover"),
        "advise example": load_scenario(str(bench_sim.API_EXAMPLE)),
        "no effect": bench_sim.no_effect(),
        "every effect": every,
        "every effect, no limits": every.replace(rate_limits=RateLimits()),
        "preset, every effect": every_preset,
        "preset, every effect, no limits": every_preset.replace(rate_limits=RateLimits()),
        "EVERYTHING": EVERYTHING,
    }
    return cases | {f"limited: {name}": scenario for name, (scenario, _) in LIMITED.items()}


def trace_text(scenario: Scenario, shape: Shape, replicate: int, tmp: Path) -> str:
    path = tmp / "trace.jsonl"
    with TraceWriter(path) as writer:
        simulate_once(scenario, shape, replicate, writer)
    text = path.read_text()
    path.unlink()
    return text


def refused(make: Any) -> str:
    """The message a bad scenario or draw is refused with."""
    try:
        make()
    except PxnError as exc:
        return f"{exc.subject}: {exc}"
    return "accepted"


def bad_inputs(preset: Scenario) -> dict[str, str]:
    """Scenarios and draws that must be refused, and what they are refused with."""
    draws = preset.uncertainty
    assert draws is not None
    first = dict(draws.draws[0])

    def with_draw(change: dict[str, float]) -> Any:
        bad = dataclasses.replace(draws, draws=(*draws.draws[:3], {**first, **change}))
        return lambda: dataclasses.replace(preset, uncertainty=bad).validate_draws()

    rollout = preset.rollout
    return {
        "negative scale": refused(with_draw({"rollout.scale": -1.0})),
        "zero shape": refused(with_draw({"rollout.s": 0.0})),
        "a share above 1": refused(
            with_draw({"quality.seed_score" if preset.quality else "acceptance.a0": 1.5})
        ),
        "unknown path": refused(with_draw({"rollout.nope": 1.0})),
        "unknown family": refused(
            lambda: preset.replace(rollout=dataclasses.replace(rollout, dist="lognormal"))
        ),
        "bad parameter": refused(
            lambda: preset.replace(rollout=dataclasses.replace(rollout, params={"x": 1.0}))
        ),
        "retries never succeed": refused(
            lambda: preset.replace(rollout=dataclasses.replace(rollout, cap=1e-9, cap_retries=2))
        ),
    }


def record(replicates: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cases = scenarios(tmp)
        for name, scenario in cases.items():
            for shape in SHAPES:
                key = f"{name} at {shape.label}"
                runs = [simulate_once(scenario, shape, r) for r in range(replicates)]
                out[f"runs: {key}"] = runs
                out[f"traces: {key}"] = [trace_text(scenario, shape, r, tmp) for r in range(TRACED)]
                acceptance = simulated_acceptance(scenario, runs)  # the quality model's
                out[f"analytic: {key}"] = analytic(scenario, shape, acceptance)
            out[f"means: {name}"] = [d.mean() for d in (scenario.rollout, scenario.reflection)]
        for name in ("livebench-math", "hover"):
            preset = cases[name]
            assert preset.uncertainty is not None
            out[f"draws applied: {name}"] = [
                preset.with_parameters(d).to_dict() for d in preset.uncertainty.draws
            ]
            out[f"sweep: {name}"] = sweep(preset, [Shape(2, 2), Shape(4, 1)], 60)
        out["refused"] = bad_inputs(cases["livebench-math"])
    return out


def fields_of(value: Any) -> dict[str, Any]:
    """A dataclass object's attributes as they are (one unpickled from an older version
    lacks the fields added since)."""
    present = vars(value) if hasattr(value, "__dict__") else {}  # not the class's defaults
    names = (f.name for f in dataclasses.fields(value))
    return {name: getattr(value, name) for name in names if name in present or not present}


def same(old: Any, new: Any) -> bool:
    """Equal to the bit in every field the older version had (a stage added since, which
    the run never entered, is new information too)."""
    if dataclasses.is_dataclass(old) and not isinstance(old, type):
        if type(old) is not type(new):
            return False
        a, b = fields_of(old), fields_of(new)
        if isinstance(a.get("speedup"), float) and type(b.get("speedup")).__name__ == "Interval":
            b["speedup"] = b["speedup"].mean  # a number then, an interval now: its mean
        return all(same(a[k], b[k]) for k in a)  # a field added since is new information
    if isinstance(old, list | tuple) and isinstance(new, list | tuple):
        return len(old) == len(new) and all(same(x, y) for x, y in zip(old, new, strict=True))
    if isinstance(old, dict) and isinstance(new, dict):
        added = new.keys() - old.keys()
        unentered = all(isinstance(new[k], float) and new[k] == 0.0 for k in added)
        return old.keys() <= new.keys() and unentered and all(same(old[k], new[k]) for k in old)
    if isinstance(old, str) and isinstance(new, str) and old.startswith('{"kind": "run_start"'):
        return same_trace(old, new)
    if isinstance(old, float) and isinstance(new, float) and math.isnan(old):
        return math.isnan(new)  # a figure undefined in both (one run, no repeats)
    return old == new


def same_trace(old: str, new: str) -> bool:
    """Two traces' texts, line for line, but for run_start's schema version (a version bump
    that adds events changes no event a run without them writes)."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    if len(old_lines) != len(new_lines) or old_lines[1:] != new_lines[1:]:
        return False
    old_start, new_start = (
        {k: v for k, v in json.loads(lines[0]).items() if k != "schema"}
        for lines in (old_lines, new_lines)
    )
    return old_start == new_start


def compare(old: dict[str, Any], new: dict[str, Any]) -> int:
    """Print every difference; the number of keys that differ."""
    differ = 0
    for key in sorted(old.keys() | new.keys()):
        if key not in old or key not in new:
            print(f"only in {'new' if key in new else 'old'}: {key}")
            differ += 1
            continue
        a, b = old[key], new[key]
        if same(a, b):
            continue
        differ += 1
        where = ""
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            first = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if not same(x, y))
            x, y = (
                fields_of(v) if dataclasses.is_dataclass(v) else v for v in (a[first], b[first])
            )
            where = f" (first at index {first}: {x!r:.300} vs {y!r:.300})"
        print(f"DIFFERS: {key}{where}")
    return differ


# Where a class went when it left a module (2026-12-07: the run summary and trace reading left
# pxn.trace): a record made before reads into the classes' new homes.
MOVED_FROM = {"pxn.trace": ("pxn.run_summary", "pxn.trace_reading")}


class RecordReader(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except AttributeError:
            for home in MOVED_FROM.get(module, ()):
                found = getattr(importlib.import_module(home), name, None)
                if found is not None:
                    return found
            raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="record this code's results here")
    action.add_argument("--compare", type=Path, help="compare this code's with a record")
    parser.add_argument("--reps", type=int, default=100, help="replicates per case and shape")
    args = parser.parse_args()
    results = record(args.reps)
    runs = sum(len(v) for k, v in results.items() if k.startswith("runs: "))
    if args.write:
        args.write.write_bytes(pickle.dumps(results))
        print(f"recorded {len(results)} results ({runs} replicates) to {args.write}")
        return
    old = RecordReader(io.BytesIO(args.compare.read_bytes())).load()
    differ = compare(old, results)
    print(f"{len(results)} results ({runs} replicates): {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
