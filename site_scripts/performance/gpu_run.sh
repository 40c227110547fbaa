#!/usr/bin/env bash
# One GPU slot: bench.gpu --quick from a clean clone of the commit, all results in one archive.
# Prepared beforehand, where git and pip work, in a folder .gpu/ that .git/info/exclude ignores:
#   git bundle create .gpu/src.bundle HEAD, and the two wheels in .gpu/wheels/ (the run guide, #gpu-slot).
# On the device, from the repository root (carry .gpu):  bash site_scripts/performance/gpu_run.sh [STEP,STEP...]
# With steps, only those run, merged into the last run's manifest (kept in /tmp, or .gpu/last.tar.gz).
# BENCH_GPU_ARGS adds options (BENCH_GPU_ARGS=--dry-run tries all of it on a CPU).
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
here=$PWD
src=/tmp/mdi-src
deps=/tmp/mdi-deps
mkdir -p "$out"
want=$(git bundle list-heads .gpu/src.bundle 2>/dev/null | awk '$2 == "HEAD" {print $1}')
if [ -d "$src" ] && [ "$(git -C "$src" rev-parse HEAD)" != "$want" ]; then rm -rf "$src"; fi
if [ ! -d "$src" ]; then
  git -c advice.detachedHead=false clone -q .gpu/src.bundle "$src" \
    || { echo "no clean clone: running the copied tree"; src=$here; }
fi
if [ ! -d "$deps" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$deps" .gpu/wheels/*.whl || exit 1
fi
cd "$src" || exit 1
if [ -n "${1:-}" ] && [ ! -f gpu-results/manifest.json ] && [ -f "$here/.gpu/last.tar.gz" ]; then
  mkdir -p gpu-results && tar -xzf "$here/.gpu/last.tar.gz" --strip-components=1 -C gpu-results
fi
PYTHONPATH="$src:$deps" PYTHONUNBUFFERED=1 python3 -m mini_deepinfer.bench.gpu --quick --device cuda:0 \
  --output-dir gpu-results --archive "$out/gpu-results.tar.gz" ${1:+--steps "$1"} ${BENCH_GPU_ARGS:-} 2>&1 \
  | tee "$out/gpu-run.log"
status=${PIPESTATUS[0]}
cp gpu-results/manifest.json "$out/" 2>/dev/null
exit "$status"
