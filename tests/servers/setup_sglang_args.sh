#!/usr/bin/env bash
# Build the venv in which the tests parse SGLang command lines with SGLang's own parser (cached; idempotent).
# Venv: ${KBENCH_SGLANG_ARGS_VENV:-~/.cache/kbench/sglang-args-venv}. Run from anywhere:
#   bash tests/servers/setup_sglang_args.sh
# sglang 0.5.23 goes in without its dependencies (they pin torch 2.14.1, CUDA kernels and flashinfer); what
# `from sglang.srt.server_args import prepare_server_args` imports is installed by name (see sglang_args.py).
# torch: ${KBENCH_SGLANG_TORCH:-torch==2.13.0}, kbench's own pin (a CPU build where pip finds one).
set -euo pipefail
venv="${KBENCH_SGLANG_ARGS_VENV:-$HOME/.cache/kbench/sglang-args-venv}"
pin="sglang==0.5.23"
torch_spec="${KBENCH_SGLANG_TORCH:-torch==2.13.0}"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -f "$venv/.kbench-ready" ] && [ "$(cat "$venv/.kbench-ready")" = "$pin" ] && [ -x "$venv/bin/python" ]; then
  echo "sglang args venv ready: $venv"
  exit 0
fi
rm -rf "$venv"  # a half-made one from an interrupted install
python3 -m venv "$venv"
py="$venv/bin/python"
cd "${TMPDIR:-/tmp}"  # not the repo: its kernels/ folder would shadow packages of that name
"$py" -m pip install -q --no-deps "$pin" "triton==3.9.0"
"$py" -m pip install -q "$torch_spec" numpy orjson psutil pybase64 requests packaging pillow starlette \
  typing_extensions msgspec pydantic pyzmq tqdm IPython aiohttp
"$py" -c "from sglang.srt.server_args import prepare_server_args"
echo "$pin" > "$venv/.kbench-ready"
echo "sglang args venv ready: $venv"
