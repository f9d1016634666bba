#!/usr/bin/env bash
# Runs on the lent H200 machine (no network): FlashInfer from the carried bundle (.whl/site.tgz, built by
# ../shared/tools/flashinfer-bundle.sh), kbench installed editable, then the steps named on the command line.
# Results and logs land in $OUT (at most 8 files come back): results.tgz, log-*.txt, jit-cache.tgz.
#   bash tests/gpu/h200.sh sweep tests cache
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site "$OUT" /tmp/res
tar xzf .whl/site.tgz -C /tmp/site
export PYTHONPATH=/tmp/site FLASHINFER_NO_DOWNLOAD=1 MAX_JOBS=16 PYTHONUNBUFFERED=1 COLUMNS=200
if [ -f .fi-cache/jit-cache.tgz ]; then mkdir -p ~/.cache && tar xzf .fi-cache/jit-cache.tgz -C ~/.cache; fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 3; }
step() { local name=$1 limit=$2; shift 2; echo "=== $name: $*"; local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/log-$name.txt" 2>&1; local rc=$?; echo "=== $name rc=$rc in $((SECONDS - t0)) s"; return 0; }
for s in "$@"; do
  case "$s" in
    env) step env 120 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; kbench env; kbench kernels' ;;
    sweep) step sweep "${SWEEP_LIMIT:-330}" kbench sweep --scenario draft-extend --kv-len 4096 --batch-size 16,64 --out /tmp/res ;;
    tests) step tests "${TESTS_LIMIT:-200}" python3 -m pytest -m gpu tests/test_gpu_kernels.py -x -q -rs ;;
    cache) du -sh ~/.cache/flashinfer 2>/dev/null; tar czf "$OUT/jit-cache.tgz" -C ~/.cache flashinfer 2>/dev/null; ls -la "$OUT" ;;
    *) step "$s" 300 bash -c "$s" ;;
  esac
done
tar czf "$OUT/results.tgz" -C /tmp res
