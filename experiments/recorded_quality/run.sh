#!/usr/bin/env bash
# The recorded quality study (README.md): the task of known quality run by the real
# gepa, recorded with the one line, calibrated from singles, held-out shapes predicted.
# Run from the repository root after `make setup`, on a machine as idle as you can get
# (the runs sleep known latencies: a busy machine wakes them late). Runs already
# recorded are kept (delete runs/ to redo).
#
#   experiments/recorded_quality/run.sh            # record, then analyse
#   experiments/recorded_quality/run.sh record     # the real gepa runs only
#   experiments/recorded_quality/run.sh analyse    # calibrate, validate, summarise
#
# A second argument --same-examples runs the second arm instead (same-examples/: every
# run on one set of examples, evaluations without noise).
set -euo pipefail
PY=.venv/bin/python
HERE=experiments/recorded_quality

step=${1:-all}
arm=("${@:2}")
case "$step" in
  record) "$PY" "$HERE/study.py" record "${arm[@]}" > /dev/null ;;
  analyse) "$PY" "$HERE/study.py" analyse "${arm[@]}" ;;
  all)
    "$PY" "$HERE/study.py" record "${arm[@]}" > /dev/null
    "$PY" "$HERE/study.py" analyse "${arm[@]}"
    ;;
  *) echo "usage: $0 [record|analyse|all] [--same-examples]" >&2; exit 2 ;;
esac
