#!/usr/bin/env bash
# The local validation study: measure real batched GEPA runs on the local LM
# pool, calibrate the simulator from single runs ONLY, predict every other
# shape (at the singles' W and at other W), and compare. Run from the
# repository root after `make setup`, on an otherwise idle machine (the two
# llama.cpp servers use both cores; anything else running disturbs the
# latencies). Re-running skips runs already measured (delete runs/ to redo).
#
#   experiments/local_validation/run.sh            # everything
#   experiments/local_validation/run.sh measure    # only the real runs
#   experiments/local_validation/run.sh analyse    # only calibrate/validate/plot
#   experiments/local_validation/run.sh quality    # only the quality model: calibrate, validate, plot
set -euo pipefail
PXN=.venv/bin/pxn
HERE=${STUDY_DIR:-experiments/local_validation}
BUDGET=${BUDGET:-200}
SERVERS=2   # llama.cpp servers, one thread each: this machine has 2 cores
# Seeds of the batched runs at W = 2, and of the singles: singles 2 and 3 were
# added later, with the runner that records each reflection's prefix tokens;
# batched seeds 3 and 4 and cross-W seed 1 in a third sitting, decided before
# any of its runs, to measure coverage on more held-out runs; batched seeds 5
# and 6 and cross-W seed 2 in a fourth, decided before its runs, after the
# run spread (load.*.run_spread) was added: runs no analysis had seen.
read -r -a SEEDS <<< "${SEEDS:-0 1 2 3 4 5 6}"
read -r -a SINGLE_SEEDS <<< "${SINGLE_SEEDS:-0 1 2 3}"
# The fourth sitting's first runs came in 25% faster than the same shapes a
# day before (median rollout 0.42 s against 0.52-0.65 s): another day's
# machine. So, decided then and before any analysis, it adds singles of its
# own day (seeds 4 to 6) to calibrate from its own conditions; the calibration
# set of the main analysis stays the eight singles (seeds 0 to 3).
read -r -a DAY_SINGLE_SEEDS <<< "${DAY_SINGLE_SEEDS:-4 5 6}"
# shape:workers. The singles (W = 1 and 2) are the calibration set: with calls
# one or two at a time the slowdown under load is identifiable from them.
SINGLES=(1x1:1 1x1:2)
# Predicted from the singles: every batched shape at the singles' W = 2 ...
BATCHED=(2x1:2 1x2:2 2x2:2 4x1:2 4x4:2)
# ... and, with fewer seeds, at a W the singles never ran (cross-W).
CROSS_W=(2x2:1 4x1:1 2x2:4 4x1:4)
read -r -a CROSS_SEEDS <<< "${CROSS_SEEDS:-0 1 2}"

real_run() {  # shape workers seed
  local run="$HERE/runs/$1-w$2-s$3"
  [ -f "$run/result.json" ] && return
  rm -rf "$run"
  echo "$(date -u +%FT%TZ) $run load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$HERE/measure.log"
  "$PXN" run --shape "$1" --budget "$BUDGET" --workers "$2" --lm-servers "$SERVERS" \
    --seed "$3" --no-progress --out "$run"
}

measure() {
  for seed in "${SINGLE_SEEDS[@]}"; do
    for spec in "${SINGLES[@]}"; do
      real_run "${spec%%:*}" "${spec##*:}" "$seed"
    done
  done
  for seed in "${SEEDS[@]}"; do
    for spec in "${BATCHED[@]}"; do
      real_run "${spec%%:*}" "${spec##*:}" "$seed"
    done
  done
  for seed in "${CROSS_SEEDS[@]}"; do
    for spec in "${CROSS_W[@]}"; do
      real_run "${spec%%:*}" "${spec##*:}" "$seed"
    done
  done
  for seed in "${DAY_SINGLE_SEEDS[@]}"; do
    for spec in "${SINGLES[@]}"; do
      real_run "${spec%%:*}" "${spec##*:}" "$seed"
    done
  done
}

quality() {
  # The quality model, fitted to the eight singles' scores (seed and best scores,
  # acceptance, skips, validation gain, examples' spread, repeated evaluations), then
  # every run predicted: its wall-clock and its best validation score, each against
  # the predicted 5-95%. Beside analyse()'s acceptance rates, from the same singles.
  local singles=("$HERE"/runs/1x1-w[12]-s[0-3])
  "$PXN" calibrate "${singles[@]}" -o "$HERE/calibrated-quality.toml" --search quality \
    | tee "$HERE/calibrate-quality.txt"
  "$PXN" validate --scenario "$HERE/calibrated-quality.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation-quality" | tee "$HERE/validation-quality.txt"
  "$PXN" plot progress "$HERE/calibrated-quality.toml" -o "$HERE/progress.png" --workers 2 \
    --shapes single,2x2,4x4 --reps 400 "$HERE"/runs/{1x1,2x2,4x4}-w2-s[0-4]
  # Beside analyse()'s acceptance rates, by summary.md's groups.
  .venv/bin/python "$HERE/summarise.py" "$HERE" quality | tee "$HERE/summary-quality.md"
}

analyse() {
  # The scenario with its parameter uncertainty (100 bootstrap draws), and the
  # same point estimate without it, to show what the uncertainty adds.
  local singles=("$HERE"/runs/1x1-w[12]-s[0-3])  # the calibration set: the eight singles
  # Acceptance rates (--search rates), as this study was made; quality() fits the
  # quality model to the same runs' scores.
  "$PXN" calibrate "${singles[@]}" -o "$HERE/calibrated.toml" --plots "$HERE/fits" \
    --search rates | tee "$HERE/calibrate.txt"
  "$PXN" calibrate "${singles[@]}" -o "$HERE/calibrated-point.toml" --draws 0 --search rates \
    > /dev/null
  # The same with the servers' prompt-prefix cache left out: what modelling it changes.
  "$PXN" calibrate "${singles[@]}" -o "$HERE/calibrated-nocache.toml" --prefix-cache no \
    --search rates > /dev/null
  # 400 replicates: every one of the 100 draws twice (the split of the spread needs two).
  "$PXN" validate --scenario "$HERE/calibrated.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation" | tee "$HERE/validation.txt"
  "$PXN" validate --scenario "$HERE/calibrated-point.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation-point" | tee "$HERE/validation-point.txt"
  "$PXN" validate --scenario "$HERE/calibrated-nocache.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation-nocache" | tee "$HERE/validation-nocache.txt"
  # The same draws with each model's run_spread left out: what a new run's own
  # conditions add to the intervals.
  .venv/bin/python "$HERE/without_run_spread.py" "$HERE"
  "$PXN" validate --scenario "$HERE/calibrated-nospread.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation-nospread" | tee "$HERE/validation-nospread.txt"
  # Not a prediction: the point estimate with the held-out batched runs' own
  # acceptance rate, to measure how much of the error the acceptance gap explains.
  .venv/bin/python "$HERE/counterfactual.py" "$HERE"
  # The batched runs at W = 2 calibrated alone, for what they say of acceptance.
  "$PXN" calibrate "$HERE"/runs/{1x2,2x1,2x2,4x1,4x4}-w2-s[0-4] -o "$HERE/calibrated-batched.toml" \
    --draws 0 --search rates | tee "$HERE/calibrate-batched.txt"
  "$PXN" validate --scenario "$HERE/calibrated-batched-rate.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation-batched-rate" | tee "$HERE/validation-batched-rate.txt"
  # The singles and ONE batched run, the first the study measured (2x1 at W = 2,
  # seed 0): a user who adds a small batched run to the calibration set, so that
  # calibrate fits the batched steps' own acceptance (acceptance.batched).
  "$PXN" calibrate "${singles[@]}" "$HERE/runs/2x1-w2-s0" -o "$HERE/calibrated-one-batched.toml" \
    --search rates | tee "$HERE/calibrate-one-batched.txt"
  "$PXN" validate --scenario "$HERE/calibrated-one-batched.toml" "$HERE"/runs/* --reps 400 \
    --out "$HERE/validation-one-batched" | tee "$HERE/validation-one-batched.txt"
  # ... and every other choice of that one run among the first three sittings' (25
  # calibrations; about 6 minutes).
  .venv/bin/python "$HERE/one_batched.py" "$HERE" | tee "$HERE/one-batched.md"
  # The fourth sitting ran on a faster machine than the first three: calibrated from
  # its own day's singles, its batched runs predicted (the same day's conditions).
  "$PXN" calibrate "$HERE"/runs/1x1-w[12]-s[4-6] -o "$HERE/calibrated-day.toml" \
    --search rates | tee "$HERE/calibrate-day.txt"
  "$PXN" validate --scenario "$HERE/calibrated-day.toml" "$HERE"/runs/1x1-w[12]-s[4-6] \
    "$HERE"/runs/{1x2,2x1,2x2,4x1,4x4}-w2-s[56] "$HERE"/runs/{2x2,4x1}-w[14]-s2 --reps 400 \
    --out "$HERE/validation-day" | tee "$HERE/validation-day.txt"
  # Error and coverage by group (calibration singles, held-out at W = 2, cross-W, the
  # fourth sitting).
  .venv/bin/python "$HERE/summarise.py" "$HERE" | tee "$HERE/summary.md"
  # Why the misses miss: acceptance by shape, a 4x4 run's stages against simulated.
  .venv/bin/python "$HERE/diagnose.py" "$HERE" | tee "$HERE/diagnosis.md"
  # Whether the singles' acceptance differs from run to run more than the model's.
  .venv/bin/python "$HERE/acceptance_spread.py" "$HERE" | tee "$HERE/acceptance-spread.md"
  "$PXN" plot timeline "$HERE/runs/2x2-w2-s0" -o "$HERE/timeline_2x2.png"
  "$PXN" plot timeline "$HERE/runs/1x1-w2-s0" -o "$HERE/timeline_single.png"
}

case "${1:-all}" in
  measure) measure ;;
  analyse) analyse ;;
  quality) quality ;;
  all) measure; analyse; quality ;;
  *) echo "usage: $0 [measure|analyse|quality|all]" >&2; exit 2 ;;
esac
