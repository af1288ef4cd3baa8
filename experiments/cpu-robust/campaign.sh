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
# The arms of the preset's top comment, in priority order. Arms 1-9 are done (ARMS="0-2 3-4 5-6 7-12 20-21
# 0-4,7-8,13-15 16-19,22-23 24-25 26-27 28-30 31-32 28,33" replays them: every run plans as done); the default is
# arms 10-15, the practice-matched map. A judged grid names the tuning grids that choose its lr (grid 44 judges arm
# 7's variants, tuned on grid 24; arm 13's on grids 28, 29, 31 and 47), so their runs plan as done or run first.
# The stability arm is cpu_robust_more's: EXP=cpu_robust_more, the same command.
# Grids 28,47 first: relu's 4 new tuning runs at d_model 128, on whose outcome its published judged runs wait.
ARMS=${ARMS:-"28,47 34-35 24,36-44 45-46 28,29,31,47-48 49-50 51-52"}
for grids in $ARMS; do
  echo "=== cpu_robust grids $grids ($(date -u +%FT%TZ))"
  WANDB_MODE=offline "$PY" -m ffnbench.sweep cpu_robust --confirm --launcher joblib --grids "$grids" --no-report \
    "${restore[@]}" -- logger=csv
  restore=()
done
