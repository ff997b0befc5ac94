#!/usr/bin/env bash
# Issue 5 §4, advise against reality: on the local LM pool (2 llama.cpp servers,
# W = 2), ask `pxn advise` for the fastest allocation at a fixed budget, run the
# recommendation and clearly slower allocations for real, and compare the
# predicted ranking with the measured one. Run from the repository root after
# `make setup`; runs already measured are skipped (delete runs/ to redo).
#
#   experiments/advise_check/run.sh            # everything
#   experiments/advise_check/run.sh calibrate  # or: advise, measure, compare
set -euo pipefail
PXN=.venv/bin/pxn
PY=.venv/bin/python
HERE=${CHECK_DIR:-experiments/advise_check}
STUDY=experiments/local_validation
BUDGET=${BUDGET:-200}
read -r -a SEEDS <<< "${SEEDS:-0 1}"

real_run() {  # shape b budget seed dir
  [ -f "$5/result.json" ] && return
  rm -rf "$5"
  echo "$(date -u +%FT%TZ) $5 load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$HERE/measure.log"
  "$PXN" run --shape "$1" --minibatch "$2" --budget "$3" --workers 2 --lm-servers 2 \
    --seed "$4" --no-progress --out "$5"
}

calibrate() {
  # The local study's first four singles (b = 3; seeds 0 and 1, as when this
  # check was run) and two more at b = 1, so that b's effect on the reflection
  # is measured (two b) rather than approximated from one.
  for seed in "${SEEDS[@]}"; do
    real_run 1x1 1 "$BUDGET" "$seed" "$HERE/runs/cal-1x1-b1-s$seed"
  done
  "$PXN" calibrate "$STUDY"/runs/1x1-w*-s[01] "$HERE"/runs/cal-* -o "$HERE/calibrated.toml" \
    | tee "$HERE/calibrate.txt"
  # The runner runs a step's k reflections at once (C = P x N, up to the 2
  # servers); the singles it was calibrated from had C = 1.
  "$PY" - "$HERE" <<'PY'
import sys
from pxn.scenario import Scenario
here = sys.argv[1]
Scenario.load(f"{here}/calibrated.toml").replace(reflection_concurrency=16, workers=2).save(
    f"{here}/scenario.toml",
    header="calibrated.toml with W = 2 and reflection_concurrency = 16 (written by run.sh):\n"
    "the runner sends a step's k reflections at once, and the 2 LM servers cap them.",
)
PY
}

advise() {
  "$PXN" advise "$HERE/scenario.toml" --budget "$BUDGET" --workers 2 --p 1..4 --n 1..4 \
    --minibatch 1..4 --reps 400 --out "$HERE/advice" | tee "$HERE/advise.txt"
}

measure() {
  # pick.py names the recommendation and two clearly slower allocations: PxN:b each.
  for spec in $("$PY" "$HERE/pick.py" "$HERE/advice/advise.json"); do
    shape=${spec%%:*} b=${spec##*:}
    for seed in "${SEEDS[@]}"; do
      real_run "$shape" "$b" "$BUDGET" "$seed" "$HERE/runs/$shape-b$b-s$seed"
    done
  done
}

compare() {
  "$PY" "$HERE/compare.py" "$HERE" | tee "$HERE/comparison.md"
  # Each run's latencies beside the calibration's: were the conditions the same?
  "$PY" "$HERE/conditions.py" "$HERE" | tee "$HERE/conditions.md"
}

case "${1:-all}" in
  calibrate|advise|measure|compare) "$1" ;;
  all) calibrate; advise; measure; compare ;;
  *) echo "usage: $0 [calibrate|advise|measure|compare|all]" >&2; exit 2 ;;
esac
