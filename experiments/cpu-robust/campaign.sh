#!/usr/bin/env bash
# The robust CPU campaign (conf/experiment/cpu_robust.yaml), one arm at a time in priority order, two runs at once
# (joblib, one thread each: 1.4x the tokens per second of one two-threaded run on a 2-core machine). Resumable:
# rerun it after any interruption; a finished run is never trained again. On a fresh clone, restore the published
# runs first:  experiments/cpu-robust/campaign.sh --restore experiments/cpu-robust/results.jsonl
# Publish what has finished (results.jsonl and sweep.json of every arm so far), then rebuild the report:
#   python experiments/cpu-robust/snapshot.py && python -m ffnbench.report experiments/cpu-robust/results.jsonl
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
restore=("$@")
# The arms of the preset's top comment, in priority order (arms 1-4 are done; grids 20-21 go first among the rest:
# until their tuning runs finish, arm 4's 2-layer judged runs wait for their lr). Arm 5 judges at the neighbours of
# lrs that arms 1 and 4 chose, so it names their tuning grids too (their runs plan as done), as grid 33 names relu's
# d_model 128 grid. The stability arm is cpu_robust_more's: EXP=cpu_robust_more, the same command.
for grids in 0-2 3-4 5-6 7-12 20-21 0-4,7-8,13-15 16-19,22-23 24-25 26-27 28-30 31-32 28,33; do
  echo "=== cpu_robust grids $grids ($(date -u +%FT%TZ))"
  WANDB_MODE=offline "$PY" -m ffnbench.sweep cpu_robust --confirm --launcher joblib --grids "$grids" --no-report \
    "${restore[@]}" -- logger=csv
  restore=()
done
