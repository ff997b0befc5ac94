#!/usr/bin/env bash
# The untimed-adapter study (README.md): a plain thread-pool adapter recorded
# with the one line, against the same adapter timing each rollout. Run from
# the repository root after `make setup`, on a machine as idle as you can
# get (the runs sleep known latencies: a busy machine wakes them late).
# Runs already recorded are kept (delete runs/ to redo).
#
#   experiments/untimed/run.sh             # everything
#   experiments/untimed/run.sh record      # the synthetic runs only
#   experiments/untimed/run.sh analyse     # calibrate, validate, summarise
#   experiments/untimed/run.sh coverage    # the estimator's intervals on simulated runs
#   experiments/untimed/run.sh lm          # the round trip on the local LM pool
set -euo pipefail
PY=.venv/bin/python
PXN=.venv/bin/pxn
HERE=experiments/untimed
export LITELLM_LOCAL_MODEL_COST_MAP=True

lm_run() {  # name shape seed
  local run="$HERE/runs/lm/$1"
  [ -f "$run.json" ] && return
  rm -rf "$run"
  echo "$(date -u +%FT%TZ) $run load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$HERE/measure.log"
  "$PY" "$HERE/lm_run.py" "$run" --shape "$2" --seed "$3" --budget 100 > "$run.log" 2>&1
  tail -n 1 "$run.log" > "$run.json"  # the totals, after gepa's own log lines
  rm -rf "$run/gepa" "$run.log"
}

lm() {
  lm_run single 1x1 0
  lm_run 2x2 2x2 0
  "$PXN" calibrate "$HERE/runs/lm/single" -o "$HERE/calibrated/lm.toml" > "$HERE/calibrate/lm.txt"
  "$PXN" validate --scenario "$HERE/calibrated/lm.toml" "$HERE/runs/lm/2x2" \
    --out "$HERE/validation/lm" > "$HERE/validation/lm.txt"
  cat "$HERE/validation/lm.txt"
}

step=${1:-all}
case "$step" in
  record) "$PY" "$HERE/study.py" record > /dev/null ;;
  analyse) "$PY" "$HERE/study.py" analyse ;;
  coverage) "$PY" "$HERE/coverage.py" ;;
  lm) lm ;;
  all)
    "$PY" "$HERE/study.py" record > /dev/null
    "$PY" "$HERE/study.py" analyse
    "$PY" "$HERE/coverage.py"
    lm
    ;;
  *) echo "usage: $0 [record|analyse|coverage|lm]" >&2; exit 2 ;;
esac
