"""Issue #30's evidence: can a scenario calibrated from short runs say what a longer run buys?

    .venv/bin/python experiments/learning_curves_evidence/evidence.py record quality
    .venv/bin/python experiments/learning_curves_evidence/evidence.py record lm
    .venv/bin/python experiments/learning_curves_evidence/evidence.py analyse quality
    .venv/bin/python experiments/learning_curves_evidence/evidence.py analyse lm

Two arms, each calibrated from single runs at a budget B and asked, by `pxn sweep
--budgets B,2B,4B,8B`, for the best validation score of single and two batched shapes at
each budget; real runs to 8B of each shape answer, each read at every budget on the way
(budget_reading.py: a run to 8B holds the runs to B, 2B and 4B as its prefixes).

- quality: the task of known quality run by the real gepa with a user's adapter and the
  one recording line (experiments/recorded_quality/quality_run.py), B = 500. Calibrated
  from that study's eight singles at B (seeds 0-7); held out: single (seeds 8-13), 2x2 and
  4x4 (seeds 0-5), run here to 8B = 4000. Beside the calibrated scenario, the same with
  the true [quality] (what a perfect calibration of the search would give). The task is
  deterministic given its seed, so the recorded study's runs at B of the same shape and
  seed are the prefixes of these runs to the bit (checked: prefix-check.md).
- lm: `pxn run --task topics` on the local LM pool (SmolLM2-135M, two llama.cpp servers,
  W = 2), B = 40. Calibrated from eight singles at B (seeds 0-7); held out: single (seeds
  8-11), 2x2 and 4x1 (seeds 0-3), run to 8B = 320; and, read at B, 2B and 4B, the local
  study's 21 runs of these shapes at W = 2 and B = 200 (experiments/local_validation).

`record` makes an arm's runs, one at a time, each logged in ARM/measure.log (UTC start,
the 1-minute load, for the LM the other llama.cpp servers running, the seconds taken);
runs already recorded are kept. Each LM run holds the machine's lock (fcntl.flock on
/tmp/lm.lock, which every LM user of the shared machine takes) and waits, holding it, up
to a minute for the last holder's llama.cpp servers to be gone; `record lm STOP_AT` (a
UTC time, 2026-12-07T07:05+00:00) starts no run after it. `analyse` calibrates (`pxn
calibrate --search quality`), predicts (`pxn sweep`, 400 replicates, seed 0), reads the
runs and writes ARM/readings.csv, ARM/summary.md and ARM/curves.png (and, for the
quality arm, prefix-check.md).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime as dt
import fcntl
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from budget_reading import at_budget
from compare import (
    SINGLE,
    GainRow,
    Reading,
    ScoreRow,
    coverage,
    gain_rows,
    predicted_gains,
    predicted_scores,
    score_rows,
    shape_name,
)

from pxn.run_summary import summarize
from pxn.trace import Decision, Reflection, Rollout, Validation
from pxn.trace_reading import Trace, read_one

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent.relative_to(ROOT)  # paths as the reports show them
PXN = Path(sys.executable).parent / "pxn"
RECORDED = ROOT / "experiments" / "recorded_quality"
LOCAL_STUDY = ROOT / "experiments" / "local_validation" / "runs"
REPLICATES = "400"
LOCK = Path("/tmp/lm.lock")  # the machine's lock: one LM run (anyone's) at a time
SERVERS_WAIT = 60.0  # seconds an LM run waits, holding the lock, for others' servers to end


@dataclass(frozen=True)
class Arm:
    name: str  # its folder in the study's
    budget: int  # B: the calibration runs'
    shapes: tuple[str, str, str]  # single, then two batched shapes
    calibration: tuple[Path, ...]  # runs at B, relative to the repository's root
    held_out: tuple[tuple[str, int], ...]  # (shape, seed): runs to 8B, recorded here
    # Runs recorded elsewhere at a budget between B and 8B, read at the budgets they reach.
    earlier: tuple[Path, ...] = ()
    earlier_source: str = ""

    @property
    def budgets(self) -> tuple[int, ...]:
        return tuple(self.budget * 2**i for i in range(4))

    @property
    def longest(self) -> int:
        return self.budgets[-1]

    @property
    def folder(self) -> Path:
        return HERE / self.name

    def held_out_run(self, shape: str, seed: int) -> Path:
        return self.folder / "runs" / f"{shape}-b{self.longest}-s{seed}"


QUALITY = Arm(
    name="quality",
    budget=500,
    shapes=("1x1", "2x2", "4x4"),
    calibration=tuple(RECORDED.relative_to(ROOT) / "runs" / f"1x1-s{seed}" for seed in range(8)),
    held_out=tuple(
        [("1x1", seed) for seed in range(8, 14)]
        + [(shape, seed) for shape in ("2x2", "4x4") for seed in range(6)]
    ),
)
LM = Arm(
    name="lm",
    budget=40,
    shapes=("1x1", "2x2", "4x1"),
    calibration=tuple(HERE / "lm" / "runs" / f"1x1-b40-s{seed}" for seed in range(8)),
    held_out=tuple(
        [("1x1", seed) for seed in range(8, 12)]
        + [(shape, seed) for shape in ("2x2", "4x1") for seed in range(4)]
    ),
    earlier=tuple(
        LOCAL_STUDY.relative_to(ROOT) / f"{shape}-w2-s{seed}"
        for shape in ("1x1", "2x2", "4x1")
        for seed in range(7)
    ),
    earlier_source="local study, B=200",
)
ARMS = {arm.name: arm for arm in (QUALITY, LM)}


# ---- recording ----


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def log_line(arm: Arm, started: str, text: str) -> None:
    """A run's line in measure.log, written when it ends: its start (UTC) and `text`."""
    with (ROOT / arm.folder / "measure.log").open("a") as log:
        log.write(f"{started} {text}\n")


def load_now() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def llama_servers() -> int:
    """llama.cpp servers running on this machine now (anyone's)."""
    count = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if b"llama_cpp.server" in (proc / "cmdline").read_bytes():
                    count += 1
    return count


def quality_module():
    """experiments/recorded_quality's quality_run.py (its directory on the path, as its
    own scripts import it) and study.py (under its own name: this folder is no package)."""
    sys.path.insert(0, str(RECORDED))
    import quality_run

    spec = importlib.util.spec_from_file_location("recorded_quality_study", RECORDED / "study.py")
    assert spec is not None and spec.loader is not None
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    return quality_run, study


def interleaved(cells: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """(shape, seed) cells, each shape's first seed, then each shape's second, and so on."""
    rank: dict[str, int] = {}
    ranked = []
    for shape, seed in cells:
        ranked.append((rank.get(shape, 0), shape, seed))
        rank[shape] = rank.get(shape, 0) + 1
    return [(shape, seed) for _, shape, seed in sorted(ranked)]


def record_quality(arm: Arm) -> None:
    """The held-out runs to 8B, in this process, each shape's first seed, then each one's
    second, and so on (a slow spell of the shared machine falls on every shape alike);
    gepa's chatter on stdout is dropped."""
    from pxn.shape import Shape

    quality_run, _ = quality_module()
    # The recorded study's first arm (each run its own examples) at the longer budget.
    longer = quality_run.Arm(arm.name, quality_run.TRUTH.replace(budget=arm.longest),
                             same_examples=False)  # fmt: skip
    for shape, seed in interleaved(arm.held_out):
        out = ROOT / arm.held_out_run(shape, seed)
        totals = out.with_suffix(".json")
        if totals.exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        stamp, started, load = utc_now(), time.monotonic(), load_now()
        with contextlib.redirect_stdout(io.StringIO()):
            result = quality_run.run(out, Shape.parse(shape), seed, longer)
        shutil.rmtree(out / "gepa")
        totals.write_text(json.dumps(result) + "\n")
        took = time.monotonic() - started
        log_line(arm, stamp, f"{out.relative_to(ROOT)} load: {load} took {took:.1f} s")


@contextlib.contextmanager
def machine_lock():
    """The shared machine's lock (LOCK, fcntl.flock), held for one run: other users' LM
    runs wait for it, ours waits for theirs. Yields the seconds waited for it."""
    started = time.monotonic()
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wait_for_servers() -> float:
    """Seconds waited (SERVERS_WAIT at most) for the llama.cpp servers of the lock's last
    holder to be gone."""
    started = time.monotonic()
    while time.monotonic() - started < SERVERS_WAIT and llama_servers():
        time.sleep(2)
    return time.monotonic() - started


def record_lm(arm: Arm, stop_at: dt.datetime | None = None) -> None:
    """The calibration singles at B, then the held-out runs to 8B interleaved by shape, one
    `pxn run` at a time, each holding the machine's lock; none started after `stop_at`."""
    cells = [(SINGLE, seed, arm.budget, ROOT / path) for seed, path in enumerate(arm.calibration)]
    cells += [
        (shape, seed, arm.longest, ROOT / arm.held_out_run(shape, seed))
        for shape, seed in interleaved(arm.held_out)
    ]
    for shape, seed, budget, out in cells:
        if (out / "result.json").exists():
            continue
        shutil.rmtree(out, ignore_errors=True)
        with machine_lock() as locked:
            if stop_at is not None and dt.datetime.now(dt.UTC) >= stop_at:
                print(f"stopped at {utc_now()}: {out.relative_to(ROOT)} and after not run")
                return
            waited = wait_for_servers()
            load, others = load_now(), llama_servers()
            stamp, started = utc_now(), time.monotonic()
            done = subprocess.run(
                [str(PXN), "run", "--task", "topics", "--shape", shape, "--budget", str(budget),
                 "--workers", "2", "--lm-servers", "2", "--seed", str(seed), "--no-progress",
                 "--out", str(out)],
                cwd=ROOT, capture_output=True, text=True,
            )  # fmt: skip
            took = time.monotonic() - started
        log_line(
            arm,
            stamp,
            f"{out.relative_to(ROOT)} load: {load} other llama servers: {others} "
            f"waited {locked:.0f} s for the lock and {waited:.0f} s for servers "
            f"took {took:.1f} s exit {done.returncode}",
        )
        if done.returncode != 0:
            raise SystemExit(f"pxn run ended {done.returncode}: {done.stderr[-2000:]}")


# ---- analysis ----


def pxn(output: Path, *args: str | Path) -> None:
    """A pxn command from the repository root, niced, its stdout kept in `output` (stderr,
    the progress of the work with its time estimates, only when it fails)."""
    command = ["nice", "-n", "5", str(PXN), *map(str, args)]
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    output.write_text(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"pxn {args[0]} ended {done.returncode}: {done.stderr[-2000:]}")


def calibration_runs(arm: Arm) -> list[Path]:
    """The calibration runs at B that were made (the LM arm's README says why some may
    not be), in the design's order."""
    return [run for run in arm.calibration if (ROOT / run / "trace.jsonl").exists()
            and (arm is QUALITY or (ROOT / run / "result.json").exists())]  # fmt: skip


def predictors(arm: Arm) -> dict[str, Path]:
    """Calibrate the arm's scenario (and, for the quality task, the same with the truth's
    [quality]): label -> scenario file."""
    folder = ROOT / arm.folder
    scenario = arm.folder / "calibrated.toml"
    pxn(folder / "calibrate.txt", "calibrate", *calibration_runs(arm), "-o", scenario,
        "--search", "quality")  # fmt: skip
    made = {"calibrated": scenario}
    if arm is QUALITY:
        from pxn.calibrate.traces.quality import seed_validation

        quality_run, study = quality_module()
        measured = seed_validation([read_one(ROOT / run) for run in arm.calibration])
        truth = dataclasses.replace(quality_run.TRUTH.quality, seed_validation=measured)
        oracle = arm.folder / "calibrated-true-quality.toml"
        study.with_true_quality(ROOT / scenario, truth, ROOT / oracle)
        made["true quality"] = oracle
    return made


Prediction = tuple[Path, dict[int, Path]]  # sweep.csv of the curve; of each gain's sweep


def gain_budgets(arm: Arm) -> tuple[int, ...]:
    """The larger budgets whose paired gain over B is predicted: 8B, and 4B too when runs
    recorded elsewhere reach no further than that."""
    return (arm.longest, arm.budgets[2]) if arm.earlier else (arm.longest,)


def predict(arm: Arm, label: str, scenario: Path) -> Prediction:
    """The curve at every budget, and the paired gain over B of each of gain_budgets: their
    sweep.csv files."""
    shapes = ",".join(shape_name(s) for s in arm.shapes)
    suffix = "" if label == "calibrated" else "-" + label.replace(" ", "-")
    sweeps = [("sweep", arm.budgets)]
    for last in gain_budgets(arm):
        name = "gain" if last == arm.longest else f"gain-{last}"
        sweeps.append((name, (arm.budget, last)))
    made = []
    for name, budgets in sweeps:
        out = arm.folder / f"{name}{suffix}"
        (ROOT / out).mkdir(parents=True, exist_ok=True)
        pxn(ROOT / out / "table.txt", "sweep", scenario,
            "--budgets", ",".join(map(str, budgets)), "--shapes", shapes,
            "--reps", REPLICATES, "--seed", "0", "--jobs", "2", "--wide", "--out", out)  # fmt: skip
        made.append(ROOT / out / "sweep.csv")
    return made[0], dict(zip(gain_budgets(arm), made[1:], strict=True))


def readings_of(run: Path, source: str, budgets: Sequence[int]) -> list[Reading]:
    """The run read at each of `budgets` it reached."""
    trace = read_one(ROOT / run)
    start = trace.run_start
    found = []
    for budget in budgets:
        if budget > start.budget:
            break
        summary = summarize(at_budget(trace, budget))
        assert summary.best_score is not None
        reading = Reading(
            run=run.name,
            source=source,
            shape=start.shape,
            seed=start.seed,
            budget=budget,
            best_score=summary.best_score,
            metric_calls=summary.metric_calls,
            wall_clock=summary.wall_clock,
        )
        found.append(reading)
    return found


def recorded(arm: Arm, shape: str, seed: int) -> bool:
    """Whether `record` finished the held-out run (it writes the totals last)."""
    run = ROOT / arm.held_out_run(shape, seed)
    return (run.with_suffix(".json") if arm is QUALITY else run / "result.json").exists()


def complete_rounds(arm: Arm) -> list[tuple[str, int]]:
    """The held-out (shape, seed) cells of every round `record` completed: it makes them
    in rounds of a seed of each shape (`interleaved`); a round cut short by the time is
    left out, and so is every round after it."""
    order, size = interleaved(arm.held_out), len(arm.shapes)
    kept: list[tuple[str, int]] = []
    for start in range(0, len(order), size):
        one = order[start : start + size]
        if not all(recorded(arm, shape, seed) for shape, seed in one):
            break
        kept += one
    return kept


def read_all(arm: Arm) -> list[Reading]:
    readings = []
    for shape in arm.shapes:
        for held_shape, seed in complete_rounds(arm):
            if held_shape == shape:
                run = arm.held_out_run(shape, seed)
                readings += readings_of(run, "this study", arm.budgets)
    for run in arm.earlier:
        readings += readings_of(run, arm.earlier_source, arm.budgets)
    return readings


def write_readings(path: Path, readings: Sequence[Reading]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        fields = [field.name for field in dataclasses.fields(Reading)]
        writer.writerow(fields)
        for r in readings:
            writer.writerow(
                [f"{v:.3f}" if isinstance(v, float) else v for v in dataclasses.astuple(r)]
            )


# ---- the prefix check (quality arm) ----


def search_record(trace: Trace) -> dict[str, list]:
    """What a run's search did, comparable between two runs of one seed (no times)."""

    def untimed(events: list) -> list:
        return [dataclasses.replace(e, start=0.0, end=0.0) for e in events]

    return {
        "validations": untimed(trace.of(Validation)),
        "decisions": untimed(trace.of(Decision)),
        "reflections": sorted((r.iteration, r.proposal, r.parent) for r in trace.of(Reflection)),
        "rollouts": sorted(
            (r.iteration, r.phase, r.candidate, r.example, r.score) for r in trace.of(Rollout)
        ),
    }


def prefix_differences(longer: Trace, shorter: Trace) -> list[str]:
    """How `longer` read at `shorter`'s budget differs from `shorter`: [] when it agrees."""
    budget = shorter.run_start.budget
    prefix = at_budget(longer, budget)
    ends = [(t.run_end.metric_calls, t.run_end.iterations) for t in (prefix, shorter)]
    found = [] if ends[0] == ends[1] else [f"calls and iterations {ends[0]} != {ends[1]}"]
    ours, theirs = search_record(prefix), search_record(shorter)
    found += [f"{name} differ" for name in ours if ours[name] != theirs[name]]
    return found


def prefix_check(arm: Arm) -> str:
    """Each held-out run to 8B against the recorded study's run at B of its shape and seed."""
    lines = [
        "# The prefix reading, checked",
        "",
        f"Each run to {arm.longest} read at {arm.budget} (budget_reading.py), against the "
        f"recorded quality study's run given {arm.budget} of the same shape and seed: gepa's "
        "metric calls and iterations, every validation (iteration, candidate, score), every "
        "verdict (proposal, parent, scores), every reflection and every scored rollout.",
        "",
        "| run to 8B | run at B | metric calls at B | iterations | best score at B | agrees |",
        "|---|---|---|---|---|---|",
    ]
    for shape, seed in arm.held_out:
        shorter_path = RECORDED / "runs" / f"{shape}-s{seed}"
        if not shorter_path.exists():
            continue
        longer = read_one(ROOT / arm.held_out_run(shape, seed))
        shorter = read_one(shorter_path)
        prefix = summarize(at_budget(longer, arm.budget))
        differences = prefix_differences(longer, shorter)
        lines.append(
            f"| {arm.held_out_run(shape, seed).name} | {shorter_path.name} "
            f"| {prefix.metric_calls} | {prefix.iterations} | {prefix.best_score:.2f} "
            f"| {'yes' if not differences else 'no: ' + '; '.join(differences)} |"
        )
    return "\n".join(lines) + "\n"


# ---- the summary ----


def score_table(rows: Sequence[ScoreRow]) -> list[str]:
    lines = [
        "| shape | budget | runs | measured mean | sd | predicted mean | error | inside 5-95% "
        "| strictly inside | width |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {shape_name(r.shape)} | {r.budget} | {r.runs} | {r.measured_mean:.3f} "
            f"| {r.measured_sd:.3f} | {r.predicted.mean:.3f} | {r.error:+.3f} "
            f"| {r.inside}/{r.runs} | {r.strictly_inside}/{r.runs} | {r.predicted.width:.2f} |"
        )
    return lines


def gain_table(rows: Sequence[GainRow]) -> list[str]:
    lines = [
        "| shape | gain | runs | measured mean gain | its standard error | predicted mean gain "
        "| error | runs' gains inside the paired 5-95% | paired 5-95% |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {shape_name(r.shape)} | {r.last} - {r.first} | {r.runs} "
            f"| {r.measured_mean:+.3f} | {r.measured_se:.3f} | {r.predicted_mean:+.3f} "
            f"| {r.error:+.3f} | {r.inside}/{r.runs} "
            f"| [{r.paired.low:+.2f}, {r.paired.high:+.2f}] |"
        )
    return lines


def totals(rows: Sequence[ScoreRow], budget: int) -> list[str]:
    """Coverage and mean absolute error at the calibration budget and beyond it."""
    lines = []
    for what, chosen in (
        (f"at B = {budget}", [r for r in rows if r.budget == budget]),
        ("beyond B (2B, 4B, 8B)", [r for r in rows if r.budget > budget]),
        ("all", list(rows)),
    ):
        inside, strictly, runs = coverage(chosen)
        if not runs:
            continue
        weighted = sum(abs(r.error) * r.runs for r in chosen) / runs
        lines.append(
            f"| {what} | {runs} | {inside}/{runs} ({inside / runs:.0%}) "
            f"| {strictly}/{runs} ({strictly / runs:.0%}) | {weighted:.3f} |"
        )
    return [
        "| readings | n | inside 5-95% | strictly inside | mean abs. error of the predicted mean |",
        "|---|---|---|---|---|",
        *lines,
    ]


def summary(arm: Arm, readings: Sequence[Reading], made: dict[str, Prediction]) -> str:
    lines = [f"# {arm.name}: predicted from singles at B = {arm.budget}, against real runs", ""]
    calibrated_on = calibration_runs(arm)
    lines += [
        f"Calibrated from {len(calibrated_on)} of the {len(arm.calibration)} singles at B the "
        "design names: " + ", ".join(run.name for run in calibrated_on) + ".",
        "",
    ]
    kept = complete_rounds(arm)
    left = [cell for cell in arm.held_out if cell not in kept and recorded(arm, *cell)]
    lines += [
        f"Held-out runs to {arm.longest}: {len(kept)} of the {len(arm.held_out)} the design "
        f"names, in {len(kept) // len(arm.shapes)} complete rounds (a seed of each shape)"
        + (
            "; made but left out, their round cut short: "
            + ", ".join(arm.held_out_run(*cell).name for cell in left)
            if left
            else ""
        )
        + ".",
        "",
    ]
    sources = sorted({r.source for r in readings})
    for label, (sweep_csv, gain_csvs) in made.items():
        predicted = predicted_scores(sweep_csv)
        for source in sources:
            chosen = [r for r in readings if r.source == source]
            rows = score_rows(chosen, predicted)
            lines += [f"## {label}: {source}", "", *score_table(rows), ""]
            lines += totals(rows, arm.budget)
            for last, gain_csv in gain_csvs.items():
                paired = predicted_gains(gain_csv, last)
                gains = gain_rows(chosen, predicted, paired, arm.budget, last)
                if gains:
                    lines += ["", *gain_table(gains)]
            lines.append("")
    lines += [
        "measured mean, sd: over the runs' best validation scores read at that budget; error: "
        "predicted mean less measured mean; inside: ends included (scores move by 1/V); "
        "width: p95 - p5 of one run's predicted best score; gain L - B: each run's best "
        "score at L less its own at B, against the curve's mean at the one less its mean at "
        "the other; paired 5-95%: one replicate's gain (a sweep of the two budgets alone)."
    ]
    return "\n".join(lines) + "\n"


def figure(arm: Arm, readings: Sequence[Reading], made: dict[str, Prediction]) -> None:
    """Per shape: the predicted mean and 5-95% against the budget, each real run's line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    styles = {"calibrated": ("tab:blue", "-"), "true quality": ("tab:green", "--")}
    for ax, shape in zip(axes, arm.shapes, strict=True):
        name = shape_name(shape)
        for label, (sweep_csv, _) in made.items():
            predicted = predicted_scores(sweep_csv)
            budgets = list(arm.budgets)
            cells = [predicted[name, b] for b in budgets]
            color, line = styles[label]
            lows, highs = [c.low for c in cells], [c.high for c in cells]
            if label == "calibrated":
                ax.fill_between(budgets, lows, highs, color=color, alpha=0.12, lw=0)
            else:  # its 5-95% as two thin lines, over the calibrated band
                for ends in (lows, highs):
                    ax.plot(budgets, ends, color=color, linestyle=line, lw=0.9)
            ax.plot(budgets, [c.mean for c in cells], color=color, linestyle=line, lw=2,
                    label=f"predicted mean, 5-95% ({label})")  # fmt: skip
        runs: dict[tuple[str, str], list[Reading]] = {}
        for r in readings:
            if r.shape == shape:
                runs.setdefault((r.source, r.run), []).append(r)
        for (source, _), points in runs.items():
            earlier = source != "this study"
            ax.plot([p.budget for p in points], [p.best_score for p in points],
                    color="0.55" if earlier else "black", lw=0.8, alpha=0.7,
                    marker="." if earlier else "o", ms=3)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(arm.budgets), [str(b) for b in arm.budgets])
        ax.set_title(name)
        ax.set_xlabel("budget B (metric calls)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best validation score")
    legend = axes[0]
    legend.plot([], [], color="black", marker="o", ms=3, lw=0.8, label="a real run (this study)")
    if arm.earlier:
        legend.plot([], [], color="0.55", marker=".", lw=0.8,
                    label=f"a real run ({arm.earlier_source})")  # fmt: skip
    legend.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"{arm.name}: calibrated from singles at B = {arm.budget}; real runs read at each budget"
    )
    fig.tight_layout()
    fig.savefig(ROOT / arm.folder / "curves.png", dpi=110)
    plt.close(fig)


def analyse(arm: Arm) -> None:
    made = {label: predict(arm, label, scenario) for label, scenario in predictors(arm).items()}
    readings = read_all(arm)
    write_readings(ROOT / arm.folder / "readings.csv", readings)
    if arm is QUALITY:
        (ROOT / arm.folder / "prefix-check.md").write_text(prefix_check(arm))
    (ROOT / arm.folder / "summary.md").write_text(summary(arm, readings, made))
    figure(arm, readings, made)


if __name__ == "__main__":
    os.chdir(ROOT)
    step, name, stop = [*sys.argv[1:], "", "", ""][:3]
    if step not in ("record", "analyse") or name not in ARMS:
        print("usage: evidence.py record|analyse quality|lm [STOP_AT, UTC ISO]", file=sys.stderr)
        raise SystemExit(2)
    chosen = ARMS[name]
    (ROOT / chosen.folder).mkdir(parents=True, exist_ok=True)
    if step == "analyse":
        analyse(chosen)
    elif chosen is QUALITY:
        record_quality(chosen)
    else:
        record_lm(chosen, dt.datetime.fromisoformat(stop) if stop else None)
