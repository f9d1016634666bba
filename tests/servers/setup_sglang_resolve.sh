#!/usr/bin/env bash
# Build the venv in which the tests run SGLang 0.5.23's own argument resolution on the CPU (cached; idempotent):
# the sglang-args venv (setup_sglang_args.sh) seen through a .pth file, plus what resolution imports beyond the
# parser (transformers 5.19.0, SGLang's pin, and a few light packages). 40 MB on top of the args venv.
#   bash tests/servers/setup_sglang_resolve.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/setup_sglang_args.sh" >/dev/null
args="${KBENCH_SGLANG_ARGS_VENV:-$HOME/.cache/kbench/sglang-args-venv}"
venv="${KBENCH_SGLANG_RESOLVE_VENV:-$HOME/.cache/kbench/sglang-resolve-venv}"
pin="sglang==0.5.23 transformers==5.19.0"
exec 9>"$venv.lock"
flock 9
if [ -f "$venv/.kbench-ready" ] && [ "$(cat "$venv/.kbench-ready")" = "$pin" ] && [ -x "$venv/bin/python" ]; then
  echo "sglang resolve venv ready: $venv"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$args/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/sglang-args.pth"
cd "${TMPDIR:-/tmp}"
"$venv/bin/python" -m pip install -q "transformers==5.19.0"
"$venv/bin/python" -m pip install -q --no-deps dill sentencepiece compressed_tensors loguru gguf
echo '[{"argv": ["--model-path", "dummy"]}]' | "$venv/bin/python" "$here/sglang_resolve.py" >/dev/null
echo "$pin" > "$venv/.kbench-ready"
echo "sglang resolve venv ready: $venv"
