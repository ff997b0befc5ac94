"""A summaries file (.csv or .toml) read into Summaries, every value checked: the
formats are this package's docstring. Figures no gepa run could have reported are
refused before any simulation.
"""

from __future__ import annotations

import csv
import math
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any

from pxn.calibrate.summaries.facts import (
    RUN_QUANTITIES,
    SCALES,
    SCORE_QUANTITIES,
    Fact,
    InferenceOptions,
    Run,
    Setup,
    Summaries,
)
from pxn.calibrate.summaries.priors import Prior
from pxn.errors import PxnError
from pxn.fields import is_number, known_keys, table, whole
from pxn.shape import Shape

REQUIRED_SETUP = ("budget", "valset_size", "workers")
OPTIONAL_SETUP = (
    "trainset_size",
    "minibatch",
    "reflection_concurrency",
    "task_model",
    "reflection_model",
    "metric",
    "levels",
)
# A fact's column, and seconds per its unit for the wall-clock.
WALL_CLOCK_UNITS = {"wall_clock": 1.0, "wall_clock_minutes": 60.0, "wall_clock_hours": 3600.0}
UNIT_NAMES = {"wall_clock": "s", "wall_clock_minutes": "min", "wall_clock_hours": "h"}
SIGNED_QUANTITIES = ("val_gain",)  # a new candidate may score below its parent
TEST_SET = "test_examples"  # a run's test set size, beside its test_score
FACT_COLUMNS = (*WALL_CLOCK_UNITS, *RUN_QUANTITIES)
RUN_KEYS = {"shape", *REQUIRED_SETUP, *OPTIONAL_SETUP, *FACT_COLUMNS, TEST_SET}
SIZES = (*REQUIRED_SETUP, "trainset_size", "minibatch", "reflection_concurrency")
WHOLE_KEYS = {*SIZES, "levels", TEST_SET}  # read as whole numbers from a CSV's text
SWEEP_KEYS = ("shapes", "most_speedup_at_least", "fastest_speedup", "dollars")
INFERENCE_KEYS = ("seed", "particles", "draws", "min_acceptance", "max_generations")
SWEEP_FACTS = (  # (key, quantity, label) of each fact a [sweep] statement makes
    ("most_speedup_at_least", "most_speedup", "sweep: most batched runs' speedup"),
    ("fastest_speedup", "fastest_speedup", "sweep: fastest batched run's speedup"),
    ("dollars", "cheapest_dollars", "sweep: cheapest run's dollars"),
    ("dollars", "dearest_dollars", "sweep: dearest run's dollars"),
)


def read_summaries(path: str | Path) -> Summaries:
    """The runs and facts of a summaries file (.csv or .toml), every value checked."""
    path = Path(path)
    what = f"summaries {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PxnError("is not a text file", subject=what) from None
    except OSError as exc:
        raise PxnError(f"cannot be read: {exc.strerror}", subject=what) from None
    if path.suffix.lower() == ".csv":
        summaries = _from_csv(text, path)
    elif path.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PxnError(f"is not valid TOML: {exc}", subject=what) from None
        summaries = _from_toml(data, path)
    else:
        raise PxnError("is a .csv or a .toml file of run summaries", subject=what)
    if not summaries.facts:
        raise PxnError(
            "reports no figure to infer from (wall_clock, iterations, ...)", subject=what
        )
    if summaries.has_dollars and not all(run.setup.priced for run in summaries.runs):
        raise PxnError(
            "has facts in dollars but no task_model to price the calls with", subject=what
        )
    return summaries


# -- TOML ----------------------------------------------------------------------


def _from_toml(data: dict[str, Any], path: Path) -> Summaries:
    what = f"summaries {path}"
    known_keys(data, {"setup", "runs", "sweep", "priors", "inference"}, what)
    defaults = table(data.get("setup", {}), "[setup]", {*REQUIRED_SETUP, *OPTIONAL_SETUP})
    entries = data.get("runs", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise PxnError("is a list of [[runs]] tables", subject="runs")
    runs: list[Run] = []
    facts: list[Fact] = []
    for number, entry in enumerate(entries, start=1):
        where = f"[[runs]] {number}"
        known_keys(entry, RUN_KEYS, where)
        run = _run(defaults | entry, where)
        facts += _run_facts(entry, runs, run, where, _number)
        runs.append(run)
    if "sweep" in data:
        facts += _sweep_facts(table(data["sweep"], "[sweep]", set(SWEEP_KEYS)), defaults, runs)
    if not runs:
        raise PxnError("has no [[runs]] and no [sweep]: nothing was reported", subject=what)
    return Summaries(
        path,
        tuple(runs),
        tuple(facts),
        _priors(data.get("priors", {})),
        _options(data.get("inference", {})),
    )


def _sweep_facts(sweep: dict[str, Any], defaults: dict[str, Any], runs: list[Run]) -> list[Fact]:
    """The sweep's statements, each read from its runs (added to `runs` when not listed)."""
    shapes = sweep.get("shapes")
    if not (isinstance(shapes, list) and shapes and all(isinstance(s, str) for s in shapes)):
        raise PxnError(
            'is a list of shapes, like ["single", "2x2", "4x4"]', subject="[sweep] shapes"
        )
    parsed = [Shape.parse(s) for s in shapes]
    if len(set(parsed)) != len(parsed):
        raise PxnError("names a shape twice", subject="[sweep] shapes")
    setup = _run(defaults | {"shape": "single"}, "[setup]").setup
    batched = [s for s in parsed if s.k > 1]
    speedups = {"most_speedup_at_least", "fastest_speedup"} & set(sweep)
    if speedups and (Shape(1, 1) not in parsed or len(batched) < 2):
        raise PxnError(
            "a speedup needs single and at least two batched shapes in the sweep", subject="[sweep]"
        )
    indices = []
    for shape in [Shape(1, 1), *batched] if Shape(1, 1) in parsed else parsed:
        # A listed run of this shape on the sweep's setup is the sweep's run.
        if Run(shape, setup) not in runs:
            runs.append(Run(shape, setup))
        indices.append(runs.index(Run(shape, setup)))
    facts = []
    for key, quantity, label in SWEEP_FACTS:
        if key not in sweep:
            continue
        low, high = _number(sweep[key], f"[sweep] {key}")
        said = f"{_said(sweep[key])}x"
        if key == "most_speedup_at_least":
            if low != high:
                raise PxnError(
                    "is one number, the speedup most runs reach", subject=f"[sweep] {key}"
                )
            high, said = math.inf, f">= {low:g}x"
        elif key == "dollars":
            said = f"${_said(sweep[key])}"
        precision = _half_unit(sweep[key])
        facts.append(Fact(label, quantity, low, high, tuple(indices), said, precision=precision))
    return facts


def _priors(data: Any) -> dict[str, Prior | float]:
    priors = table(data, "[priors]")
    return {str(path): Prior.parse(spec, str(path)) for path, spec in priors.items()}


def _options(data: Any) -> InferenceOptions:
    fields = table(data, "[inference]", set(INFERENCE_KEYS))
    options = InferenceOptions(**fields)
    for name in ("seed", "particles", "draws", "max_generations"):
        whole(getattr(options, name), f"[inference] {name}", 0 if name == "seed" else 2)
    if not (is_number(options.min_acceptance) and 0 < options.min_acceptance < 1):
        raise PxnError(
            f"must be in (0, 1): got {options.min_acceptance!r}",
            subject="[inference] min_acceptance",
        )
    return options


# -- CSV -----------------------------------------------------------------------


def _from_csv(text: str, path: Path) -> Summaries:
    what = f"summaries {path}"
    reader = csv.DictReader(text.splitlines())
    columns = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in ("shape", *REQUIRED_SETUP) if c not in columns]
    if missing:
        raise PxnError(f"is missing column(s) {', '.join(missing)}", subject=what)
    known_keys(dict.fromkeys(columns), RUN_KEYS, what)
    runs: list[Run] = []
    facts: list[Fact] = []
    for number, row in enumerate(reader, start=2):
        where = f"{path.name} line {number}"
        cells = {k.strip(): v.strip() for k, v in row.items() if k and v and v.strip()}
        entry = {
            k: _whole_cell(c, f"{where} {k}") if k in WHOLE_KEYS else c for k, c in cells.items()
        }
        run = _run(entry, where)
        facts += _run_facts(entry, runs, run, where, _cell)
        runs.append(run)
    if not runs:
        raise PxnError("has no rows", subject=what)
    return Summaries(path, tuple(runs), tuple(facts))


def _whole_cell(cell: str, what: str) -> int:
    try:
        return int(cell)
    except ValueError:
        raise PxnError(f"must be a whole number: got {cell!r}", subject=what) from None


def _cell(cell: Any, what: str, signed: bool = False) -> tuple[float, float]:
    """A CSV cell: a number, or a range "low..high"."""
    parts = str(cell).split("..")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise PxnError(f"is a number or a range low..high: got {cell!r}", subject=what) from None
    if len(numbers) > 2:
        raise PxnError(f"is a number or a range low..high: got {cell!r}", subject=what)
    return _checked(numbers[0], numbers[-1], what, signed)


# -- shared by both formats ----------------------------------------------------


def _number(value: Any, what: str, signed: bool = False) -> tuple[float, float]:
    """A TOML fact: a number, or [low, high]."""
    if is_number(value):
        return _checked(float(value), float(value), what, signed)
    if isinstance(value, list) and len(value) == 2 and all(map(is_number, value)):
        return _checked(float(value[0]), float(value[1]), what, signed)
    raise PxnError(f"is a number or a range [low, high]: got {value!r}", subject=what)


def _checked(low: float, high: float, what: str, signed: bool = False) -> tuple[float, float]:
    """[low, high] as given, refused unless finite and (unless `signed`: a gain may fall)
    at least 0."""
    given = f"{low:g}" if low == high else f"{low:g}..{high:g}"
    if not (math.isfinite(low) and math.isfinite(high)):
        raise PxnError(f"must be finite: got {given}", subject=what)
    if low < 0 and not signed:
        raise PxnError(f"must be >= 0: got {given}", subject=what)
    if low > high:
        raise PxnError(
            f"is a range low..high with low <= high: got {low:g}..{high:g}", subject=what
        )
    return low, high


def _half_unit(value: Any) -> float:
    """Half a unit in the last digit a figure was written with (a range: its finer end)."""
    texts = [str(v) for v in value] if isinstance(value, list) else str(value).split("..")
    return min(0.5 * 10.0 ** Decimal(t.strip()).as_tuple().exponent for t in texts)


def _said(value: Any) -> str:
    if isinstance(value, list):
        return f"{value[0]:g}-{value[1]:g}"
    return f"{value:g}" if is_number(value) else str(value)


def _run(entry: dict[str, Any], where: str) -> Run:
    missing = [k for k in ("shape", *REQUIRED_SETUP) if k not in entry]
    if missing:
        raise PxnError(f"is missing {', '.join(missing)}", subject=where)
    numbers = {}
    for key in SIZES:
        if key in entry:
            numbers[key] = whole(entry[key], f"{where} {key}")
    numbers.setdefault("trainset_size", numbers["valset_size"])
    models = {k: str(entry[k]) for k in ("task_model", "reflection_model") if k in entry}
    setup = Setup(**numbers, **models, **_metric(entry, where))
    if setup.budget < setup.valset_size:
        raise PxnError(
            f"budget {setup.budget} is below one validation of V={setup.valset_size}", subject=where
        )
    return Run(Shape.parse(str(entry["shape"])), setup)


def _metric(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """The setup's metric and levels, checked as the [quality] table checks them."""
    from pxn.quality import Quality

    metric = {k: entry[k] for k in ("metric", "levels") if k in entry}
    if "levels" in metric and not isinstance(metric["levels"], int):
        raise PxnError(
            f"must be a whole number: got {metric['levels']!r}", subject=f"{where} levels"
        )
    try:
        Quality(0.5, **metric).validate()
    except PxnError as exc:
        raise PxnError(str(exc), subject=where) from None
    return metric


def _run_facts(entry: dict[str, Any], runs: list[Run], run: Run, where: str, parse) -> list[Fact]:
    """One run's facts, refused when no gepa run could have reported them."""
    given = {
        k: parse(entry[k], f"{where} {k}", signed=k in SIGNED_QUANTITIES)
        for k in FACT_COLUMNS
        if k in entry
    }
    clocks = [k for k in WALL_CLOCK_UNITS if k in given]
    if len(clocks) > 1:
        raise PxnError(f"gives the wall-clock twice ({' and '.join(clocks)})", subject=where)
    _check_possible(given, run, where)
    index = len(runs)
    repeated = any(r.shape == run.shape for r in runs)
    name = run.shape.label + (f" (run {index + 1})" if repeated else "")
    facts = []
    for key, (low, high) in given.items():
        per_unit = WALL_CLOCK_UNITS.get(key, 1.0)
        quantity = "wall_clock" if key in WALL_CLOCK_UNITS else key
        unit = UNIT_NAMES.get(key, "")
        label = f"{name} {quantity.replace('_', ' ')}"
        said = _said(entry[key]) + (f" {unit}" if unit else "")
        precision = _half_unit(entry[key]) * per_unit
        low, high = low * per_unit, high * per_unit
        examples = _test_examples(entry, where) if key == "test_score" else 0
        facts.append(
            Fact(label, quantity, low, high, (index,), said, unit, per_unit, precision, examples)
        )
    if TEST_SET in entry and "test_score" not in given:
        raise PxnError(f"gives {TEST_SET} without a test_score", subject=where)
    return facts


def _test_examples(entry: dict[str, Any], where: str) -> int:
    """The test set's size a test score was measured on (0: not given)."""
    value = entry.get(TEST_SET, 0)
    if isinstance(value, str):
        value = _whole_cell(value, f"{where} {TEST_SET}")
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise PxnError(f"must be a whole number: got {value!r}", subject=f"{where} {TEST_SET}")
    return value


def _check_possible(given: dict[str, tuple[float, float]], run: Run, where: str) -> None:
    """Refuse figures no gepa run has: each pair compared at its most lenient ends."""

    low = {key: ends[0] for key, ends in given.items()}
    high = {key: ends[1] for key, ends in given.items()}

    def refuse(problem: str) -> None:
        raise PxnError(problem, subject=where)

    for key in WALL_CLOCK_UNITS:
        if high.get(key, 1) <= 0:
            refuse(f"{key} must be > 0")
    if low.get("full_val_share", 0) > 1:
        refuse(f"full_val_share {low['full_val_share']:g} is above 1 (a share of iterations)")
    for key in SCORE_QUANTITIES:
        if SCALES[key] == "logit" and high.get(key, 0) > 1:
            refuse(f"{key} {high[key]:g} is above 1 (scores and shares are 0 to 1)")

    def more(key: str, than: str, problem: str, times: int = 1) -> None:
        """Refuse `key` above `than` (times `times`), compared at their most lenient ends."""
        if key in given and than in given and low[key] > high[than] * times:
            refuse(problem)

    more(
        "iterations",
        "metric_calls",
        "has more iterations than metric calls (every iteration evaluates its parents)",
    )
    if high.get("metric_calls", math.inf) < run.setup.budget:
        refuse(
            f"has fewer metric calls than its budget {run.setup.budget} (gepa stops only "
            "once the budget is spent)"
        )
    more("full_val_iterations", "iterations", "has more full-validation iterations than iterations")
    more(
        "full_val_iterations",
        "accepted",
        "has fewer accepted proposals than full-validation iterations (each validates at least "
        "one)",
    )
    more(
        "accepted",
        "iterations",
        f"has more accepted proposals than its {run.shape.label} iterations made",
        run.shape.k,
    )
