#!/usr/bin/env bash
# FA3 absorbed MLA (issue 45) on the card: the DeepSeek MTP sweeps at 128 heads (deepseek-mtp) and 16 (-tp8), bs
# 1/4/16/64/256, q 1/2/4, kv 4096/32768, bf16 and fp8 KV, every kernel and route (all,routes), each row checked
# against the MLA float32 reference before it is timed; then a short table. Carry .whl (site.txz, the
# kbench_vllm_fa3 and sgl_flash_mla wheels). Each sweep is packed as it ends (OUT/h128.tgz, OUT/h16.tgz), and stops
# before DEADLINE_S (default 470) of the call, so a call cut short still brings back what finished.
set -u
T0=$(date +%s); DEADLINE_S=${DEADLINE_S:-470}; BUDGET=${BUDGET:-0.1}
mkdir -p /tmp/site "$OUT"
tar xJf .whl/site.txz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target /tmp/site .whl/*.whl && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
  || { echo "setup FAILED"; exit 3; }
export PYTHONPATH=/tmp/site FLASHINFER_NO_DOWNLOAD=1 MAX_JOBS=16 PYTHONUNBUFFERED=1 COLUMNS=200
echo "setup $(( $(date +%s) - T0 )) s on $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for spec in "h128 deepseek-mtp" "h16 deepseek-mtp-tp8"; do
  set -- $spec
  left=$(( DEADLINE_S - ($(date +%s) - T0) ))
  [ "$left" -gt 20 ] || { echo "$1: no time left"; continue; }
  timeout "$left" kbench sweep -s "$2" --batch-size 1,4,16,64,256 --q-len 1,2,4 --kv-len 4096,32768 \
    --kv-dtype bf16,fp8 --budget "$BUDGET" --kernels all,routes --out "$OUT/runs" --name "mla-$1" > "$OUT/$1.log" 2>&1
  echo "$1: sweep rc=$? at $(( $(date +%s) - T0 )) s"
  (cd "$OUT" && tar czf "$1.tgz" runs/mla-"$1"-*)
done
python3 - <<'PY'
import glob, os
import pandas as pd
rows = [pd.read_parquet(f) for f in glob.glob(os.environ["OUT"] + "/runs/mla-*/rows.parquet")]
r = pd.concat(rows)
r = r[r.attention == "mla"]
mla = r[r.kernel.str.contains("mla") | r.kernel.str.contains("sglang-f") | r.kernel.str.contains("vllm-fl")]
print(mla.groupby(["kernel", "status"]).agg(rows=("case_id", "size"), worst_err=("rel_err", "max")).to_string())
at = r[(r.batch_size == 16) & (r.q_len == 4) & (r.kv_len == 4096) & (r.status == "ok")]
print(at.pivot_table(index="kernel", columns=["num_qo_heads", "kv_dtype"], values="median_us").round(1).to_string())
PY
