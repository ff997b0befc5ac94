#!/usr/bin/env bash
# The reproducibility rule, as one script (docs/development.md names it): regenerate
# every committed output under experiments/ that is a pure function of committed
# inputs -- the committed traces and run directories, the presets (sim/presets/*.toml),
# the committed scenario TOMLs -- with the code of the checkout it runs in. It records
# no run, starts no LM server and measures nothing real: each step below is a study's
# analysis-only entry point (read to be sure of that), in the order the studies' inputs
# need (recording's single.toml before learning_curves, which sweeps it).
#
#   experiments/reanalyse.sh            # every step, in order
#   experiments/reanalyse.sh STEP ...   # only these (names as the `== step` lines print)
#   experiments/reanalyse.sh --list     # the steps' names
#
# Then `git status --short; git diff --stat` says which committed outputs the code of
# this checkout no longer reproduces. Run from anywhere (it cds to the repository root)
# after `make setup`. A step that fails is reported and the next one runs; the exit
# code is 1 if any failed. Each step prints `== step NAME` on stderr, then its time.
#
# Takes about 39 minutes on 2 cores under `nice -n 19` (measured 2026-12-07 on a clean
# clone of b82ced6, the machine shared with other work): local_validation_analyse 30 min
# (one_batched.py's 25 calibrations, about 1 min each), then learning_curves_evidence,
# past_runs, local_validation_quality and recorded_quality at 1.3-1.5 min each, every
# other step under a minute.
#
# Left out, on purpose:
# - experiments/paper/run.sh infer: the presets (sim/presets/*.toml) are this script's
#   inputs; re-inferring them (about 10 minutes) is a study of its own (paper/README.md).
# - every step that records or measures: each study's record/measure step (real gepa
#   runs, the local LM pool); experiments/conformance/ (its outputs are real gepa runs
#   judged by `pxn conformance`: re-running records new runs); experiments/bench/
#   (timings of this machine); local_validation's a_oversubscribed/ and b_shared_machine/
#   (earlier sittings whose runs are not committed).
# - experiments/advise_check/run.sh calibrate, advise and measure: its measured runs were
#   made for the committed advice (advice/advise.json); re-advising would ask about
#   allocations nobody ran. Only `compare` (the committed advice against those runs).
# - experiments/interrupts: its results*.json are real (or stand-in) compiles; the step
#   here only re-prints their summaries and checks README.md still holds them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export LITELLM_LOCAL_MODEL_COST_MAP=True  # nothing here reaches the network for prices

paper() { experiments/paper/run.sh predict; }
advise_example() { experiments/advise_example/run.sh; }
recording() { "$PY" experiments/recording/run.py analyse; }
learning_curves() { experiments/learning_curves/run.sh; }
optimize_anything() { "$PY" experiments/optimize_anything/run.py analyse; }
messy_runs() {
  "$PY" experiments/messy_runs/run.py analyse tuning held-out check-tuning check-held-out
}
untimed_analyse() { experiments/untimed/run.sh analyse; }
untimed_lm() {
  # run.sh lm records the two LM runs unless their totals exist: refuse rather than record.
  local run
  for run in single 2x2; do
    [ -f "experiments/untimed/runs/lm/$run.json" ] \
      || { echo "experiments/untimed/runs/lm/$run.json missing: lm would record" >&2; return 1; }
  done
  experiments/untimed/run.sh lm
}
untimed_coverage() { experiments/untimed/run.sh coverage; }  # simulated runs, seeded
interrupts() {
  # The summary tables stress.py prints from the committed results: README.md must hold
  # each of their rows (not the per-compile table, nor the refusals' list it words apart).
  local arm printed line missing=0
  for arm in "" --standin; do
    printed=$("$PY" experiments/interrupts/stress.py --summarise ${arm:+"$arm"})
    while IFS= read -r line; do
      grep -qFx -- "$line" experiments/interrupts/README.md \
        || { echo "README.md lacks: $line" >&2; missing=1; }
    done < <(awk 'f && /^[|]/; /^$/ {n++} n >= 2 {f = 1}' <<< "$printed")
  done
  return "$missing"
}
advise_check() { experiments/advise_check/run.sh compare; }
past_runs() {
  local arm
  for arm in quality quality-state local dspy; do
    "$PY" experiments/past_runs/study.py analyse "$arm"
  done
  "$PY" experiments/past_runs/summarise.py
}
recorded_quality() {
  experiments/recorded_quality/run.sh analyse
  experiments/recorded_quality/run.sh analyse --same-examples
}
learning_curves_evidence() {
  experiments/learning_curves_evidence/run.sh analyse
  experiments/learning_curves_evidence/run.sh presets
}
local_validation_analyse() { experiments/local_validation/run.sh analyse; }
local_validation_quality() { experiments/local_validation/run.sh quality; }

STEPS=(paper advise_example recording learning_curves optimize_anything messy_runs
  untimed_analyse untimed_lm untimed_coverage interrupts advise_check past_runs
  recorded_quality learning_curves_evidence local_validation_analyse local_validation_quality)

if [ "${1:-}" = --list ]; then printf '%s\n' "${STEPS[@]}"; exit 0; fi
chosen=("${STEPS[@]}")
[ "$#" -gt 0 ] && chosen=("$@")
for step in "${chosen[@]}"; do
  [[ " ${STEPS[*]} " == *" $step "* ]] || { echo "no step $step (--list)" >&2; exit 2; }
done

failed=() times=()
for step in "${chosen[@]}"; do
  echo "== $step" >&2
  start=$SECONDS
  set +e
  ( set -e; "$step" )
  rc=$?
  set -e
  took=$((SECONDS - start))
  times+=("$(printf '%-26s %4d s%s' "$step" "$took" "$([ "$rc" = 0 ] || echo "  FAILED ($rc)")")")
  if [ "$rc" != 0 ]; then
    failed+=("$step")
    echo "== $step FAILED (exit $rc) after $took s" >&2
  else
    echo "== $step done in $took s" >&2
  fi
done
printf '%s\n' "${times[@]}" >&2
if [ "${#failed[@]}" -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
