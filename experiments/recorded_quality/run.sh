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
set -euo pipefail
PY=.venv/bin/python
HERE=experiments/recorded_quality

step=${1:-all}
case "$step" in
  record) "$PY" "$HERE/study.py" record > /dev/null ;;
  analyse) "$PY" "$HERE/study.py" analyse ;;
  all)
    "$PY" "$HERE/study.py" record > /dev/null
    "$PY" "$HERE/study.py" analyse
    ;;
  *) echo "usage: $0 [record|analyse]" >&2; exit 2 ;;
esac
