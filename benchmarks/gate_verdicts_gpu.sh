#!/usr/bin/env bash
# The kernel gate's three verdicts on one GPU, from its own noise (issue #54):
#   bash benchmarks/gate_verdicts_gpu.sh [OUT]        # N=6 by default: N=8 bash benchmarks/gate_verdicts_gpu.sh
# N sweeps of one grid, nothing changed (A/A); one short sweep (--budget 0.002 --min-time 0: too few samples a
# row to tell 5%); one with fa2-prefill slowed x2 (--slow-kernel). Gates every A/A pair (single-run baselines),
# a baseline of the first two runs (kbench baseline) against each later run, and the short and the slowed
# sweep against the first; prints the card, a verdict line per gate and the counts: A/A FAILs (false alarms),
# INCONCLUSIVE, and what the short and slowed sweeps got. Needs a CUDA GPU and FlashInfer (docs/gate.md).
set -u
OUTD=${1:-${OUT:-/tmp/kbench-gate-verdicts}}; N=${N:-6}; KB=${KBENCH:-python3 -m kbench.cli.main}
R=$OUTD/runs; mkdir -p "$R"
GRID=(--scenario draft-extend --kv-len 4096 --batch-size 16,64 --kernels trtllm-decode,fa2-prefill,decode-wrapper)
sweep() {  # name, extra options: prints the run folder
  local n=$1; shift
  $KB sweep "${GRID[@]}" "$@" --out "$R" --name "$n" > "$R/log-$n.txt" 2>&1 || echo "sweep $n: exit $?" >&2
  ls -d "$R/$n"-*/ | head -n 1
}
gate() {  # tag, gate options: one line, the verdict's first line
  local tag=$1; shift
  $KB gate "$@" > "$OUTD/gate-$tag.txt" 2>&1
  local rc=$?
  echo "$rc" > "$OUTD/gate-$tag.rc"
  echo "$tag: exit $rc :: $(head -n 1 "$OUTD/gate-$tag.txt")"
}
aa=()
for i in $(seq 1 "$N"); do aa+=("$(sweep "aa$i")"); done
short=$(sweep short --budget 0.002 --min-time 0)
slow=$(sweep slow --slow-kernel fa2-prefill=2)
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
for ((i = 0; i < N; i++)); do for ((j = i + 1; j < N; j++)); do gate "aa-$i-$j" --baseline "${aa[i]}" --candidate "${aa[j]}"; done; done
$KB baseline "${aa[0]}" "${aa[1]}" --name aa2 --out "$OUTD/baselines" > "$OUTD/baseline.txt" 2>&1
for ((j = 2; j < N; j++)); do gate "base2-$j" --baseline "$OUTD/baselines/aa2" --candidate "${aa[j]}"; done
gate short --baseline "${aa[0]}" --candidate "$short"
gate slow --baseline "${aa[0]}" --candidate "$slow"
count() { local n=0 k=0 f; for f in "$OUTD"/gate-$1.rc; do [ -f "$f" ] || continue; k=$((k + 1)); [ "$(cat "$f")" = "$2" ] && n=$((n + 1)); done; echo "$n of $k"; }
echo "A/A single-run: FAIL $(count 'aa-*' 1), INCONCLUSIVE $(count 'aa-*' 3); baseline of 2 runs: FAIL $(count 'base2-*' 1), INCONCLUSIVE $(count 'base2-*' 3)"
echo "short: $(head -n 1 "$OUTD/gate-short.txt")"
echo "slowed fa2-prefill x2: $(head -n 1 "$OUTD/gate-slow.txt")"
