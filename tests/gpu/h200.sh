#!/usr/bin/env bash
# The lent H200 (no network): set the machine up, run the campaign's steps (tests/gpu/campaign.py), pack $OUT.
#   bash tests/gpu/h200.sh [--deadline-s S] [--limit STEP=S]... [--fresh] STEP|GROUP ...
#   bash tests/gpu/h200.sh --list          # the steps, their time limits and groups
# Carried (run's carry list):
#   .whl        site.txz (or site.tgz): the FlashInfer bundle (../shared/tools/flashinfer-bundle.sh, then
#               tests/gpu/slim_bundle.sh); any other *.whl (e.g. the FlashMLA wheel sgl_flash_mla-*.whl)
#   .fi-cache   jit-cache.tgz.part-* (the cache step's parts: FlashInfer's JIT cache) and aot.tgz (modules
#               built by tests/gpu/prebuild.py or the aot-pack step; the aot step checks them)
#   .gpu-carry  results.tgz / adaptive.tgz (or their .part-*) of an earlier call: its run folders come back,
#               so a sweep cut short is resumed and a complete one reused
# Back in $OUT: summary.txt (the table), results.tgz (logs/ and run folders), adaptive.tgz, and what the
# cache / aot-pack steps write. Exit: the driver's (0 all steps passed, 1 not, 2 bad arguments), 3 setup failed.
set -uo pipefail
export CAMPAIGN_T0=${CAMPAIGN_T0:-$(date +%s)}  # the call's start: the driver's deadline counts from here
export OUT=${OUT:-/tmp/out} SITE=${SITE:-/tmp/site} RES=${RES:-/tmp/res}
C=${CARRY:-.}  # where the carried folders are (the repository root on the machine)
export PYTHONPATH=$SITE FLASHINFER_NO_DOWNLOAD=1 MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1 COLUMNS=250
PY=${PYTHON:-python3}
case " $* " in *" --list "*) exec "$PY" tests/gpu/campaign.py --list ;; esac
"$PY" tests/gpu/campaign.py --check "$@" || exit $?  # a bad step name costs no setup
mkdir -p "$SITE" "$OUT" "$RES/logs"
log=$RES/logs/setup.txt
say() { echo "setup: $*" | tee -a "$log"; }
die() { say "FAILED: $*"; echo "setup FAILED: $*" >> "$OUT/summary.txt"; tar czf "$OUT/results.tgz" -C "$(dirname "$RES")" "$(basename "$RES")"; exit 3; }

# the FlashInfer bundle, then any other wheel (FlashMLA...) into the same site folder
untar() { tar xf "$1" -C "$2" 2>>"$log" ||  # Python's tarfile where tar lacks xz
  "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
if [ -f "$C/.whl/site.txz" ]; then untar "$C/.whl/site.txz" "$SITE" || die "cannot unpack .whl/site.txz"
elif [ -f "$C/.whl/site.tgz" ]; then untar "$C/.whl/site.tgz" "$SITE" || die "cannot unpack .whl/site.tgz"
else die "no FlashInfer bundle: carry .whl with site.txz (or site.tgz)"; fi
say "FlashInfer bundle unpacked into $SITE"
wheels=("$C"/.whl/*.whl)
if [ -e "${wheels[0]}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}" \
    >>"$log" 2>&1 || die "pip could not install ${wheels[*]} (logs/setup.txt)"
  say "installed ${wheels[*]}"
fi

# FlashInfer's JIT cache (the cache step's parts) and the AOT modules (checked by the driver's aot step)
if ls "$C"/.fi-cache/jit-cache.tgz.part-* >/dev/null 2>&1; then
  mkdir -p "$HOME/.cache" && cat "$C"/.fi-cache/jit-cache.tgz.part-* | tar xz -C "$HOME/.cache" \
    && say "JIT cache restored: $(du -sh "$HOME/.cache/flashinfer" | cut -f1)" || say "JIT cache parts do not unpack: ignored"
fi
if [ -f "$C/.fi-cache/aot.tgz" ]; then
  export AOT_ARCHIVE=$(cd "$C/.fi-cache" && pwd)/aot.tgz  # tta-prebuild installs it again with kbench prebuild --load
  mkdir -p "$SITE/flashinfer/data" && tar xzf "$C/.fi-cache/aot.tgz" -C "$SITE/flashinfer/data/" \
    && say "AOT modules unpacked: $(ls -d "$SITE"/flashinfer/data/aot/*/ 2>/dev/null | wc -l)" || die "cannot unpack .fi-cache/aot.tgz"
fi

# an earlier call's run folders; --skip-old-files: on a machine still warm the newer files here win
for t in "$C"/.gpu-carry/*.tgz "$C"/.gpu-carry/*.tgz.part-aa; do
  [ -f "$t" ] || continue
  case "$t" in *.part-aa) cat "${t%aa}"* ;; *) cat "$t" ;; esac | tar xz --skip-old-files -C "$(dirname "$RES")" \
    && say "restored $t" || say "cannot unpack $t: ignored"
done

"$PY" -m pip install -q --no-deps --no-build-isolation -e . >>"$log" 2>&1 || die "pip install -e . failed (logs/setup.txt)"
say "kbench installed; $(( $(date +%s) - CAMPAIGN_T0 )) s of setup"

"$PY" tests/gpu/campaign.py "$@"
rc=$?
# the driver packs after every step; if it died before its first, the logs still come back
[ -f "$OUT/results.tgz" ] || [ -f "$OUT/results.tgz.part-aa" ] || tar czf "$OUT/results.tgz" -C "$(dirname "$RES")" "$(basename "$RES")"
ls -la "$OUT"
exit $rc
