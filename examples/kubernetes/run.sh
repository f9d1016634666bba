#!/bin/bash
# prebuild -> the Indexed Job's slices -> merge and report, each step once the one before completed.
# bash examples/kubernetes/run.sh   (kubectl pointed at the cluster; edit the image and the grid in the YAML)
# Each submission's runs go to their own folder, /results/runs/$RUN_ID (the jobs' @RUN_ID@), so the merge
# never meets an earlier submission's slices; the previous submission's finished Jobs are deleted first (a Job's
# spec cannot be changed in place), its runs stay on the volume.
set -euo pipefail
cd "$(dirname "$0")"
RUN_ID=${RUN_ID:-$(date -u +%Y%m%d-%H%M%S)}
with_run_id() { sed "s/@RUN_ID@/$RUN_ID/g" "$1"; }
kubectl apply -f pvc.yaml
kubectl delete job kbench-prebuild kbench-sweep kbench-merge --ignore-not-found
kubectl apply -f prebuild-job.yaml
kubectl wait --for=condition=complete --timeout=60m job/kbench-prebuild
with_run_id sweep-job.yaml | kubectl apply -f -
kubectl wait --for=condition=complete --timeout=6h job/kbench-sweep
with_run_id merge-job.yaml | kubectl apply -f -
kubectl wait --for=condition=complete --timeout=30m job/kbench-merge
kubectl logs job/kbench-merge
