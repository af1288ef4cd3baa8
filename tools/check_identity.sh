#!/usr/bin/env bash
# Published records must keep planning as finished and their reports must rebuild to the committed text
# (apart from the generation time and the rebuild-path line). Run it after any change to config, naming or the
# report: it prints one line per check and exits 1 if any differs.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[[ "$PY" = /* ]] || PY="$PWD/$PY"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
root=$PWD
plan() {  # preset, published results, expected count
  local line
  line=$(mkdir -p "$tmp/plan-$1" && cd "$tmp/plan-$1" && PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" \
         "$PY" -m ffnbench.sweep "$1" --dry-run --restore "$root/$2" 2>&1 | grep -E "^$1: [0-9]+ runs:")
  if [[ "$line" == *"$3 skipped"*" 0 resumed, 0 started"* || ( "$4" == partial && "$line" == *"$3 skipped"* ) ]]; then
    echo "ok    plan $1: $line"
  else
    echo "FAIL  plan $1: ${line:-no plan line} (expected $3 skipped)"; status=1
  fi
}
plan cpu_claims experiments/cpu-claims/results.jsonl 274 all
plan quick experiments/cpu-quick/results.jsonl "$(wc -l < experiments/cpu-quick/results.jsonl)" all
# partial while arms 10-15 run (issue 41): their runs plan as started; every published one must still be skipped
plan cpu_robust experiments/cpu-robust/results.jsonl "$(wc -l < experiments/cpu-robust/results.jsonl)" partial
for e in cpu-quick cpu-claims cpu-robust; do
  PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m ffnbench.report "experiments/$e/results.jsonl" --out "$tmp/$e" > /dev/null 2>&1
  if diff <(grep -vE '^\*Generated |^- source: ' "experiments/$e/REPORT.md") \
          <(grep -vE '^\*Generated |^- source: ' "$tmp/$e/REPORT.md") > "$tmp/$e.diff"; then
    echo "ok    report $e rebuilds identically"
  else
    echo "FAIL  report $e differs:"; head -20 "$tmp/$e.diff"; status=1
  fi
done
exit $status
