#!/bin/bash
# A sweep spread over a Slurm job array, then merged and reported by a job that waits for the whole array:
#   prebuild (1 GPU) -> sweep array (one GPU per task, --shard auto) -> merge + report (CPU)
# Run from a login node: bash examples/slurm/submit.sh   (edit the variables below first)
set -euo pipefail
cd "$(dirname "$0")"
export KBENCH_VENV=${KBENCH_VENV:-$HOME/kbench/.venv}                 # a venv with kbench installed (pip install -e .)
export GRID="--scenario draft-extend --kv-len 4096 --batch-size 16,64"   # the sweep's grid options
export NAME=draft-extend                                               # run folders: $OUT/$NAME-<array job>/...
export OUT=${OUT:-$HOME/kbench-results}                                # on a file system every node sees
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$HOME/kbench-jit}   # the shared JIT cache
SHARDS=${SHARDS:-8}
mkdir -p "$OUT" "$FLASHINFER_WORKSPACE_BASE"

# 1. every FlashInfer module the grid needs, built once into the shared JIT cache (the tasks then only load)
pre=$(sbatch --parsable prebuild.sbatch)
# 2. one slice per task: --shard auto reads SLURM_ARRAY_TASK_ID/_MIN/_COUNT; the array must be a range
arr=$(sbatch --parsable --dependency=afterok:"$pre" --array=0-$((SHARDS - 1)) sweep-array.sbatch)
# 3. the merge waits for every task of the array (afterok: a task that failed stops it; wrong kernels do not) and
#    joins this submission's slices only: each array writes under $OUT/$NAME-<its job id>
sbatch --dependency=afterok:"$arr" --export=ALL,ARRAY_JOB_ID="$arr" merge.sbatch
echo "submitted: prebuild $pre, sweep array $arr (${SHARDS} tasks), merge after both"
