#!/bin/bash
# prebuild -> the Indexed Job's slices -> merge and report, each step once the one before completed.
# bash examples/kubernetes/run.sh   (kubectl pointed at the cluster; edit the image and the grid in the YAML)
set -euo pipefail
cd "$(dirname "$0")"
kubectl apply -f pvc.yaml
kubectl apply -f prebuild-job.yaml
kubectl wait --for=condition=complete --timeout=60m job/kbench-prebuild
kubectl apply -f sweep-job.yaml
kubectl wait --for=condition=complete --timeout=6h job/kbench-sweep
kubectl apply -f merge-job.yaml
kubectl wait --for=condition=complete --timeout=30m job/kbench-merge
kubectl logs job/kbench-merge
