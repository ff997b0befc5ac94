#!/usr/bin/env bash
# Issue #30's evidence (README.md): learning curves predicted from singles at B, against
# real runs to 8B read at B, 2B, 4B and 8B; and the presets against the paper.
# Run from the repository root after `make setup`. Runs already recorded are kept.
#
#   experiments/learning_curves_evidence/run.sh record    # the real runs: quality, then LM
#   experiments/learning_curves_evidence/run.sh analyse   # calibrate, predict, read, compare
#   experiments/learning_curves_evidence/run.sh presets   # the presets against the paper
set -euo pipefail
PY=.venv/bin/python
HERE=experiments/learning_curves_evidence

case "${1:-}" in
  record)
    "$PY" "$HERE/evidence.py" record quality
    "$PY" "$HERE/evidence.py" record lm
    ;;
  analyse)
    "$PY" "$HERE/evidence.py" analyse quality
    "$PY" "$HERE/evidence.py" analyse lm
    ;;
  presets) "$PY" "$HERE/presets.py" ;;
  *) echo "usage: $0 record|analyse|presets" >&2; exit 2 ;;
esac
