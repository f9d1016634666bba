set -u; T0=$(date +%s); mkdir -p /tmp/site; tar xJf .whl/site.txz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo SETUP FAILED; exit 3; }
export PYTHONPATH=/tmp/site FLASHINFER_NO_DOWNLOAD=1 MAX_JOBS=16 PYTHONUNBUFFERED=1 COLUMNS=200
echo "setup $(( $(date +%s) - T0 )) s"; nvidia-smi --query-gpu=name --format=csv,noheader
kbench sweep -s deepseek-mtp --batch-size 4,64 --q-len 4 --kv-len 4096 --kv-dtype bf16,fp8 --budget 0.1 --kernels vllm-fa3-mla,vllm-fa3-mla-sgl-call,flashmla,flashinfer-mla-fa3,routes --out $OUT/runs --name chk > $OUT/sweep.log 2>&1; echo "sweep rc=$? $(( $(date +%s) - T0 )) s"
tail -5 $OUT/sweep.log
python3 - <<'PY'
import glob, pandas as pd
import os
r = pd.concat([pd.read_parquet(f) for f in glob.glob(os.environ["OUT"] + "/runs/chk*/rows.parquet")])
r = r[r.attention == "mla"] if "attention" in r else r
m = r[~r.kernel.isin(["reference"]) & ((r.status != "skipped") | r.kernel.str.contains("mla"))]
pd.set_option("display.width", 250); pd.set_option("display.max_colwidth", 90)
print(m[["kernel", "batch_size", "kv_dtype", "status", "median_us", "host_us", "rel_err", "reason"]].sort_values(["kv_dtype", "batch_size", "kernel"]).to_string(index=False))
PY
cd $OUT && tar czf runs.tgz runs && rm -rf runs
