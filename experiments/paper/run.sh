#!/usr/bin/env bash
# Re-run the paper-preset study: infer the presets from the paper's reported
# figures (simulation-based inference), then predict both sweeps.
# Run from the repository root after `make setup`.
set -euo pipefail
PXN=.venv/bin/pxn
.venv/bin/python experiments/paper/infer_presets.py
for preset in livebench-math hover; do
  mkdir -p "experiments/paper/$preset"
  "$PXN" sweep "$preset" --reps 200 --jobs 2 --seed 0 --out "experiments/paper/$preset" \
    | tee "experiments/paper/$preset/table.txt"
done
