#!/usr/bin/env bash
# Slim a FlashInfer bundle made by ../shared/tools/flashinfer-bundle.sh to fit the device's 64 MiB carry limit
# (with the repo's ~16 MB and the 10 MB FlashMLA wheel): FlashInfer 0.7.4 ships ~137 MB of C++/CUDA sources
# outside flashinfer/data (the cake_* backends, experimental/, moe_ep) that no kbench kernel compiles (xqa,
# fa2/fa3, fmha-v2 and the MLA wrappers build from flashinfer/data), and xz packs the rest tighter than gzip:
# 52 MB (.tgz) -> about 20 MB (.txz).
#   bash ../shared/tools/flashinfer-bundle.sh .whl/site.tgz 0.7.4 3.12 && bash tests/gpu/slim_bundle.sh .whl/site.tgz
# writes .whl/site.txz and removes the .tgz (tests/gpu/h200.sh unpacks either).
set -euo pipefail
tgz=$1
out=${tgz%.tgz}.txz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/site"
tar xzf "$tgz" -C "$work/site"
find "$work/site/flashinfer" -type f -not -path "$work/site/flashinfer/data/*" \
  \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.hpp' -o -name '*.inl' -o -name '*.cpp' -o -name '*.cc' \) \
  > "$work/list"
xargs -d '\n' rm -f < "$work/list"
echo "sources removed: $(wc -l < "$work/list")"
tar cf - -C "$work/site" . | xz -9 -T2 > "$out.tmp" && mv "$out.tmp" "$out" && rm -f "$tgz"
ls -la "$out"
