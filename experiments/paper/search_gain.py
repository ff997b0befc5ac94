"""What the paper presets say of the search's gain: a markdown report on stdout.

    .venv/bin/python experiments/paper/search_gain.py > experiments/paper/search-gain.md

For each preset it simulates the shapes the paper reports a test score for
(single and one batched shape), 200 replicates each at seed 0, replicate r on
posterior draw r mod 100: the sweep's own replicates (`run.sh predict`), so the
mean test scores are sweep.json's. Per replicate it takes the chosen
candidate's test score (its expected score on a fresh example) and the seed's
(the draw's quality.seed_score), and prints, as median [5%, 95%] over the
replicates:

- the seed's score, the single run's test score, and their difference: the
  gain of the search over its seed;
- the correlation of seed and test score over the replicates;
- the batched shape's test score less single's (paired: the same draw), as
  expected scores, and as the paper measured them, each drawn as a binomial of
  its test set's size (rng seed 0), against the paper's difference.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from pxn.shape import Shape
from pxn.sim.predict import SINGLE, simulate_shapes
from pxn.sim.presets import load_scenario

HERE = Path(__file__).resolve().parent
PRESETS = ("livebench-math", "hover")
REPLICATES = 200  # as run.sh predict's sweep
JOBS = 2


def spread(values: np.ndarray, digits: int = 3) -> str:
    low, median, high = np.percentile(values, (5, 50, 95))
    return f"{median:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def report(preset: str) -> None:
    facts = tomllib.loads((HERE / f"{preset}.summaries.toml").read_text(encoding="utf-8"))
    scored = {run["shape"]: run for run in facts["runs"] if "test_score" in run}
    other = next(shape for shape in scored if shape != "single")
    batched = Shape.parse(other)
    scenario = load_scenario(preset)
    runs = simulate_shapes(scenario, [SINGLE, batched], REPLICATES, jobs=JOBS)
    seed = np.array([scenario.for_replicate(r).quality.seed_score for r in range(REPLICATES)])
    test = {shape: np.array([r.test_score for r in runs[shape]]) for shape in (SINGLE, batched)}
    print(f"## {preset}\n")
    print(f"{REPLICATES} replicates of single and {other}, seed 0; median [5%, 95%]\n")
    print(f"- seed's score (quality.seed_score of the replicate's draw): {spread(seed)}")
    print(f"- single's test score: {spread(test[SINGLE])} (mean {test[SINGLE].mean():.3f})")
    print(f"- {other}'s test score: {spread(test[batched])} (mean {test[batched].mean():.3f})")
    print(f"- single's gain over its seed (test - seed): {spread(test[SINGLE] - seed)}")
    print(f"  - replicates whose gain is below 0.05: {np.mean(test[SINGLE] - seed < 0.05):.0%}")
    correlation = np.corrcoef(seed, test[SINGLE])[0, 1]
    print(f"- correlation of seed and single's test score: {correlation:.2f}")
    rng = np.random.default_rng(0)
    measured = {}
    for shape, name in ((SINGLE, "single"), (batched, other)):
        examples = scored[name]["test_examples"]
        measured[shape] = rng.binomial(examples, test[shape]) / examples
    reported = scored[other]["test_score"] - scored["single"]["test_score"]
    difference = measured[batched] - measured[SINGLE]
    low, high = np.percentile(difference, (5, 95))
    print(f"- {other} less single, expected scores: {spread(test[batched] - test[SINGLE])}")
    print(
        f"- {other} less single, on test sets of {scored['single']['test_examples']} and "
        f"{scored[other]['test_examples']} examples: {spread(difference)}; the paper's "
        f"{reported:+.3f} {'inside' if low <= reported <= high else 'outside'}; "
        f"{np.mean(difference >= reported):.0%} of replicates at least as large\n"
    )


def main() -> None:
    print("# The search's gain in the paper presets\n")
    print("Written by experiments/paper/search_gain.py (simulates; a few seconds).\n")
    for preset in PRESETS:
        report(preset)


if __name__ == "__main__":
    main()
