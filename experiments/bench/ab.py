"""Old code against new on a shared machine: CPU in lockstep, or instructions counted.

    .venv/bin/python experiments/bench/ab.py checkout COMMIT DIR
    .venv/bin/python experiments/bench/ab.py cpu OLD_DIR NEW_DIR SCENARIO SHAPE [--rounds 10]
    .venv/bin/python experiments/bench/ab.py instructions DIR SCENARIO SHAPE [--reps 10]

`checkout` lays a commit's code out as the pxn package (pxn/, with sim/,
runner/, calibrate/, checks/, api/ and app/ inside it, as setuptools maps them) in DIR, to
import it from with PYTHONPATH=DIR. The working tree is the repository's
root: its pxn/ comes first on the path and the editable install maps the
subpackages to it.

`cpu` runs the simulator of both trees in two long-lived processes that take
turns, a chunk of replicates each (the same replicates every turn, after one
chunk to warm up), and compares the CPU seconds each spent: whatever else
loads the machine loads both alike, which separate runs minutes apart do
not. It prints replicates per CPU second of each and the ratio.

`instructions` counts the instructions of a chunk of warm replicates under
valgrind's callgrind (instrumented only then): a count that does not move
with the machine's load, to tell a 2% change from noise (~20 s a run; the
count is not a time: numpy calls cost more time per instruction than the
interpreter does).

No test runs this; it is for reading.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
# The folders setuptools maps into pxn (checks/ from 2026-12-07 on; an older commit lacks it).
SUBPACKAGES = ("sim", "runner", "calibrate", "checks", "api", "app")

# A worker: warm up, then run a chunk of replicates each time it reads a line, printing
# the CPU seconds it took.
WORKER = """
import sys, time
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.sim.presets import load_scenario
scenario, shape, chunk = load_scenario(sys.argv[1]), Shape.parse(sys.argv[2]), int(sys.argv[3])
def run():
    start = time.process_time()
    for replicate in range(chunk):
        simulate_once(scenario, shape, replicate)
    return time.process_time() - start
run()
print("ready", flush=True)
for line in sys.stdin:
    print(run(), flush=True)
"""


def checkout(commit: str, directory: Path) -> None:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    present = [name for name in SUBPACKAGES if name in listed]
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "pxn", *present],
        check=True,
        capture_output=True,
    ).stdout
    directory.mkdir(parents=True, exist_ok=False)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    for name in present:
        shutil.move(directory / name, directory / "pxn" / name)
    print(f"{commit} laid out in {directory}: PYTHONPATH={directory}")


def start(tree: Path, args: list[str], **options) -> subprocess.Popen:
    """A child importing pxn from `tree` (run in a scratch directory, so the
    current directory's pxn/ cannot shadow it)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.Popen(args, env=env, cwd=tempfile.gettempdir(), text=True, **options)


def cpu(old: Path, new: Path, scenario: str, shape: str, chunk: int, rounds: int) -> None:
    scenario = str(Path(scenario).resolve()) if Path(scenario).exists() else scenario
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    workers = [
        start(tree, [PYTHON, "-c", WORKER, scenario, shape, str(chunk)], **pipes)
        for tree in (old, new)
    ]
    for worker in workers:
        if worker.stdout.readline().strip() != "ready":
            sys.exit("a worker failed to start")
    seconds: list[list[float]] = [[], []]
    for turn in range(rounds):
        for w in (0, 1) if turn % 2 == 0 else (1, 0):  # who goes first alternates
            workers[w].stdin.write("go\n")
            workers[w].stdin.flush()
            seconds[w].append(float(workers[w].stdout.readline()))
    for worker in workers:
        worker.stdin.close()
        worker.wait()
    old_s, new_s = sum(seconds[0]), sum(seconds[1])
    reps = chunk * rounds
    print(
        f"{scenario} {shape}: old {reps / old_s:.1f}, new {reps / new_s:.1f} replicates per "
        f"CPU second; new/old {old_s / new_s:.3f} ({rounds} turns of {chunk} each)"
    )


def instructions(tree: Path, scenario: str, shape: str, reps: int) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    scenario = str(Path(scenario).resolve()) if Path(scenario).exists() else scenario
    with tempfile.TemporaryDirectory() as out:
        worker = start(
            tree,
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}/callgrind.%p",
             PYTHON, "-c", WORKER, scenario, shape, str(reps)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if worker.stdout.readline().strip() != "ready":
            sys.exit("the worker failed to start")
        control = ["callgrind_control", "-i"]
        subprocess.run([*control, "on", str(worker.pid)], check=True, capture_output=True)
        worker.stdin.write("go\n")
        worker.stdin.flush()
        worker.stdout.readline()
        subprocess.run([*control, "off", str(worker.pid)], check=True, capture_output=True)
        worker.stdin.close()
        worker.wait()
        counted = max(
            int(line.split()[1])
            for dump in Path(out).glob("callgrind.*")
            for line in dump.read_text().splitlines()
            if line.startswith(("summary:", "totals:"))
        )
    print(f"{tree} {scenario} {shape}: {counted / reps / 1e6:.2f} M instructions per replicate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("checkout", help="lay a commit out as the pxn package")
    made.add_argument("commit")
    made.add_argument("directory", type=Path)
    timed = commands.add_parser("cpu", help="CPU per replicate, two trees in lockstep")
    timed.add_argument("old", type=Path)
    timed.add_argument("new", type=Path)
    counted = commands.add_parser("instructions", help="instructions per replicate (callgrind)")
    counted.add_argument("tree", type=Path)
    for command in (timed, counted):
        command.add_argument("scenario", help="a preset name or a scenario TOML")
        command.add_argument("shape", help="PxN, e.g. 2x2 or 1x1")
    timed.add_argument("--chunk", type=int, default=20, help="replicates per turn")
    timed.add_argument("--rounds", type=int, default=10, help="turns each")
    counted.add_argument("--reps", type=int, default=10, help="replicates counted")
    args = parser.parse_args()
    if args.command == "checkout":
        checkout(args.commit, args.directory)
    elif args.command == "cpu":
        cpu(args.old, args.new, args.scenario, args.shape, args.chunk, args.rounds)
    else:
        instructions(args.tree, args.scenario, args.shape, args.reps)


if __name__ == "__main__":
    main()
