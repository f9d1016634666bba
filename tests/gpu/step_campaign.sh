#!/usr/bin/env bash
# Issue 53 on the GPU: the whole step's pieces, run by tests/gpu/h200.sh as shell steps (RES: the campaign's results
# folder, packed into $OUT/results.tgz):
#   bash tests/gpu/h200.sh --limit sh1=150 --limit sh2=330 --limit sh3=240 \
#     'bash tests/gpu/step_campaign.sh layers' 'bash tests/gpu/step_campaign.sh routes' 'bash tests/gpu/step_campaign.sh replay'
# layers: kbench layers for llama3-8b (dense) and qwen3-30b-a3b (MoE: the labelled estimate), bs 1/16/64, q 4/8
# routes: the draft-decode routes at q 1 and the verify/extend routes at q 4/8 (checked against the reference),
#         SGLang's flashinfer and trtllm_mha, vLLM's FLASHINFER, pages 1 and 64, kv 4096
# replay: tests/gpu/step_replay.py against kbench's priced sum from the two runs above
set -euo pipefail
RES=${RES:-/tmp/res}
KB=${KBENCH:-kbench}
case "${1:-}" in
  layers)
    mkdir -p "$RES/layers"
    $KB layers --model llama3-8b --batch-size 1,16,64 --q-len 4,8 --out "$RES/layers" --budget-s 0.5
    $KB layers --model qwen3-30b-a3b --batch-size 1,16,64 --q-len 4,8 --out "$RES/layers" --budget-s 0.5
    echo "layers: $(ls "$RES/layers")" ;;
  routes)
    $KB sweep --model llama3-8b --kernels sglang-fi-verify,sglang-fi-extend,sglang-fi-draft-decode,sglang-trtllm-mha,sglang-trtllm-mha-draft,vllm-fi-decode \
      --batch-size 1,16,64 --q-len 1,4,8 --kv-len 4096 --page-size 1,64 --budget 0.5 --out "$RES" --name step-routes
    echo "routes: $(ls -d "$RES"/step-routes-*)" ;;
  replay)
    routes=$(ls -d "$RES"/step-routes-* | head -1)
    layers=$(ls -d "$RES"/layers/layers-llama3-8b-* | head -1)
    python3 tests/gpu/step_replay.py --out "$RES/replay" --routes "$routes" --layers "$layers" ;;
  *) echo "usage: step_campaign.sh layers|routes|replay" >&2; exit 2 ;;
esac
