#!/usr/bin/env bash
# The local validation study (issue 4): measure real batched GEPA runs on the
# local LM pool, calibrate the simulator from the single runs ONLY, predict
# every other shape, and compare. Run from the repository root after
# `make setup`. Re-running skips runs already measured (delete runs/ to redo).
#
#   experiments/local_validation/run.sh            # everything
#   experiments/local_validation/run.sh measure    # only the real runs
#   experiments/local_validation/run.sh analyse    # only calibrate/validate/plot
set -euo pipefail
PXN=.venv/bin/pxn
HERE=${STUDY_DIR:-experiments/local_validation}
BUDGET=${BUDGET:-100}
SERVERS=2   # llama.cpp servers, one thread each: this machine has 2 cores
# shape:workers. The W=1 single run is for calibration: with calls only ever
# one or two at a time, the slowdown under load is identifiable from singles.
RUNS=(1x1:1 1x1:2 2x1:2 1x2:2 2x2:2 4x1:2)
read -r -a SEEDS <<< "${SEEDS:-0 1}"

measure() {
  for seed in "${SEEDS[@]}"; do
    for spec in "${RUNS[@]}"; do
      shape=${spec%%:*} workers=${spec##*:}
      run="$HERE/runs/$shape-w$workers-s$seed"
      [ -f "$run/result.json" ] && continue
      rm -rf "$run"
      echo "$(date -u +%FT%TZ) $run load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$HERE/measure.log"
      "$PXN" run --shape "$shape" --budget "$BUDGET" --workers "$workers" --servers "$SERVERS" \
        --seed "$seed" --no-progress --out "$run"
    done
  done
}

analyse() {
  "$PXN" calibrate "$HERE"/runs/1x1-* -o "$HERE/calibrated.toml" --plots "$HERE/fits" \
    | tee "$HERE/calibrate.txt"
  # Writes validation.csv, validation.json and sweep_vs_measured.png under validation/.
  "$PXN" validate --scenario "$HERE/calibrated.toml" "$HERE"/runs/* --reps 300 --out "$HERE/validation" \
    | tee "$HERE/validation.txt"
  "$PXN" plot timeline "$HERE/runs/2x2-w2-s0" -o "$HERE/timeline_2x2.png"
  "$PXN" plot timeline "$HERE/runs/1x1-w2-s0" -o "$HERE/timeline_single.png"
}

case "${1:-all}" in
  measure) measure ;;
  analyse) analyse ;;
  all) measure; analyse ;;
  *) echo "usage: $0 [measure|analyse|all]" >&2; exit 2 ;;
esac
