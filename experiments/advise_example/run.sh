#!/usr/bin/env bash
# docs/advise.md's worked example of `pxn advise` (about 2 minutes on 2 cores).
# Run from the repository root after `make setup`. --wide: the files keep every
# column, whatever the width of the terminal (or pipe) they are written from.
set -euo pipefail
PXN=.venv/bin/pxn
HERE=experiments/advise_example
SCENARIO=$HERE/livebench-math-api.toml
GRID=(--budget 5000 --workers 64,128,512 --p 1..4 --n 1..4 --minibatch 1..5)

# The ask: the fastest allocation that finishes within 4 hours and $8.
"$PXN" advise "$SCENARIO" "${GRID[@]}" --deadline 4h --max-dollars 8 --wide \
  --out "$HERE/advice" \
  | tee "$HERE/advise.txt"
# At k = 64 a stage outruns the task model's 500 requests a minute at W = 512.
"$PXN" advise "$SCENARIO" --budget 5000 --p 8 --n 8 --minibatch 5 --workers 128,512 --wide \
  > "$HERE/wide.txt"
# Two asks it refuses (exit code 1): one from the strong-scaling bound alone,
# before any simulation, and one after simulating every allocation.
for deadline in 10m 2h; do
  "$PXN" advise "$SCENARIO" "${GRID[@]}" --deadline "$deadline" --workers 64 --wide \
    > "$HERE/refused-$deadline.txt" 2>&1 && exit 1  # it must refuse
  tail -n 1 "$HERE/refused-$deadline.txt"
done
