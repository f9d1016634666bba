#!/usr/bin/env bash
# Issue 52/53 GPU items in one call, after tests/gpu/h200.sh set the machine up (PYTHONPATH at its site folder):
#   eager routes beside graph routes (scenario engine-routes-eager), gpt-oss routes with sinks and window
#   (gpt-oss-routes), SGLang's fa3 draft pass (needs the kbench_vllm_fa3 wheel in .whl), layers of deepseek-v3
#   and gpt-oss. Each under a timeout; run folders packed into $OUT/i52.tgz; the rows in brief printed last.
#   bash tests/gpu/eager_gptoss.sh [STEP...]   (steps: eager gptoss fa3draft layers; default all)
set -u
export PYTHONPATH=${SITE:-/tmp/site} FLASHINFER_NO_DOWNLOAD=1 PYTHONUNBUFFERED=1 COLUMNS=200
R=${I52:-/tmp/i52}; mkdir -p "$R"
K=(python3 -m kbench.cli.main)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $card" | tee "$R/card.txt"
tag=$(case "$card" in *H200*) echo h200 ;; *H100*) echo h100 ;; *) echo gpu ;; esac)
steps=${*:-eager gptoss fa3draft layers}
t0=$(date +%s)
for s in $steps; do
  echo "== $s ($(( $(date +%s) - t0 )) s)"
  case $s in
    eager) timeout ${T_EAGER:-260} "${K[@]}" sweep -s engine-routes-eager --out "$R" --name $tag-engine-routes-eager-kv4096 2>&1 | tail -4 ;;
    gptoss) timeout ${T_GPTOSS:-150} "${K[@]}" sweep -s gpt-oss-routes --out "$R" --name $tag-gpt-oss-routes-kv4096 2>&1 | tail -4 ;;
    fa3draft) timeout ${T_FA3:-90} "${K[@]}" sweep --model llama3-8b --kernels sglang-fa3-draft,sglang-fi-draft-decode \
        --batch-size 1,16,64 --q-len 1 --kv-len 4096 --page-size 1,64 --budget 0.5 --out "$R" --name $tag-fa3-draft-kv4096 2>&1 | tail -4 ;;
    layers) for m in ${LAYER_MODELS:-deepseek-v3 gpt-oss}; do
        timeout ${T_LAYERS:-90} "${K[@]}" layers --model $m --batch-size 1,16,64 --q-len 4,8 --budget-s 0.3 --out "$R" \
          --name $tag-layers-$m 2>&1 | tail -3; done ;;
    *) echo "unknown step $s" ;;
  esac
done
tar czf "$OUT/i52.tgz" -C "$R" .
for d in "$R"/*/; do  # sweeps in brief (a layers run has no kernel column: its own command printed its rows)
  case "$d" in *-layers-*) continue ;; esac
  [ -f "$d/manifest.json" ] && python3 tests/gpu/rows_brief.py "$d" 2>&1 | grep -v " skipped " | head -80
done
echo "card: $card; $(( $(date +%s) - t0 )) s"
