#!/usr/bin/env bash
# Re-run the paper-preset study: infer the presets from the paper's reported
# figures (simulation-based inference), predict both sweeps, and ask advise
# for LiveBench-Math's allocation. Run from the repository root after
# `make setup`.
#
#   experiments/paper/run.sh           # infer, then predict
#   experiments/paper/run.sh predict   # only the sweeps, the advice and the coverage, from the committed presets
set -euo pipefail
PXN=.venv/bin/pxn

infer() {
  .venv/bin/python experiments/paper/infer_presets.py
}

predict() {
  for preset in livebench-math hover; do
    mkdir -p "experiments/paper/$preset"
    "$PXN" sweep "$preset" --reps 200 --jobs 2 --seed 0 --out "experiments/paper/$preset" \
      | tee "experiments/paper/$preset/table.txt"
  done
  # The README's worked example: the fastest allocation within 6 hours and $16
  # in 95% of simulated runs, parameters' uncertainty included.
  "$PXN" advise livebench-math --budget 5000 --workers 128,512 --deadline 6h --max-dollars 16 \
    --reps 200 --seed 0 --jobs 2 --out experiments/paper/livebench-math/advice \
    | tee experiments/paper/livebench-math/advise.txt
  # The README's coverage figures (the paper's figures against the predicted intervals),
  # and the search's gain over its seed in the same replicates as the sweeps.
  .venv/bin/python experiments/paper/coverage.py | tee experiments/paper/coverage.md
  .venv/bin/python experiments/paper/search_gain.py | tee experiments/paper/search-gain.md
}

case "${1:-all}" in
  infer) infer ;;
  predict) predict ;;
  all) infer; predict ;;
  *) echo "usage: $0 [infer|predict|all]" >&2; exit 2 ;;
esac
