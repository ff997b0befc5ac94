#!/usr/bin/env bash
# Issue #30's learning curves and budget advice, re-made from the presets (and one DSPy
# scenario calibrated from a real recorded dspy.GEPA run). Each output's table is the
# command's stdout; --out adds its CSV, JSON and figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=experiments/learning_curves
pxn() { COLUMNS=100 nice -n 19 .venv/bin/pxn "$@"; }

# What a budget buys, per shape: HoVer and LiveBench-Math, the deadline and cap drawn.
pxn sweep hover --budgets 750..6000 --shapes single,2x2,8x1 --reps 200 --seed 0 \
    --deadline 1h --max-dollars 30 --out "$here/hover" > "$here/hover/table.txt"
pxn sweep livebench-math --budgets 1250..10000 --shapes single,2x2,4x4 --reps 200 --seed 0 \
    --deadline 4h --max-dollars 20 --out "$here/livebench-math" > "$here/livebench-math/table.txt"

# The best program by a date for a price: the budget chosen with the allocation.
pxn advise livebench-math --budget 1000..10000 --deadline 4h --max-dollars 20 \
    --objective score --seed 0 --out "$here/advise-score" > "$here/advise-score/advice.txt"
# The fastest allocation whose runs reach a test score of 0.58 nine times in ten.
pxn advise livebench-math --budget 1000..8000 --target-score 0.58 --deadline 4h --seed 0 \
    --out "$here/advise-target" > "$here/advise-target/advice.txt"

# A DSPy scenario: dspy.GEPA's auto levels are points of the curve.
pxn sweep experiments/recording/single.toml --budgets 200..1600 --shapes single,2x2 \
    --reps 200 --seed 0 --out "$here/dspy" > "$here/dspy/table.txt"
