#!/usr/bin/env bash
# Runs on the lent H200 machine (no network): FlashInfer from the carried bundle (.whl/site.tgz, built by
# ../shared/tools/flashinfer-bundle.sh), kbench installed editable, then the steps named on the command line.
# Back in $OUT (at most 8 files): results.tgz (run folders + every step's log), summary.txt, and the
# FlashInfer JIT cache split in 15 MiB parts (carry them back as .fi-cache/ to skip recompiling).
#   bash tests/gpu/h200.sh env sweep tests cache
# Steps: env, sweep, sweep2 (--devices 0), repeat (two back-to-back sweeps, the second through --devices 0,
# compared and gated), slow (the sweep at bs16 with fa2-prefill slowed, gated against the first repeat run),
# fault (test-oob-write isolated, then in-process and resumed), validate, probe (tests/gpu/probe_noise.py),
# realistic (five small sweeps: per-request KV, accept:0.7 ragged q, gpt-oss window + sinks, max_seq_len,
# skip-softmax (fmha-v2 takes it on SM90); also as parts: realistic-core (the first four), real-skip, real-table;
# tests/gpu/realistic.py prints the table; issue #13),
# ceiling (copy vs read bandwidth, and the sweep runs' best KV read rate against both: tests/gpu/ceiling.py),
# adaptive (full draft-extend grid at kv 512,4096,32768 vs --adaptive: tests/gpu/adaptive_bench.py; issue #15;
# in parts for calls with a time limit: adaptive-full, adaptive-run (each resumed by the next call), adaptive-table),
# power (issue #16: the bs 16/64 kv 4096 grid with --power both, twice; tests/gpu/power_states.py prints
# per-state repeatability, the flipped decisions, clocks and throttle reasons; ~12 min, POWER_LIMIT per sweep;
# in parts for calls with a time limit: power-1, power-2 (each resumed by the next call), power-table),
# fp8 (fp8 KV with bf16 and fp8 queries; each kernel checked), tree (issue #26: draft trees vs chains, every
# tree-capable kernel checked, the per-step mask build time: tests/gpu/tree_check.py, ~4 min), tests, cache, prebuild-bg / prebuild-wait (build
# in the background what the carried AOT modules lack for sweep and fp8, then wait for it), or any other word:
# a shell command.
set -uo pipefail
n=0
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site "$OUT" /tmp/res/logs
tar xzf .whl/site.tgz -C /tmp/site
export PYTHONPATH=/tmp/site FLASHINFER_NO_DOWNLOAD=1 MAX_JOBS=16 PYTHONUNBUFFERED=1 COLUMNS=250
if ls .fi-cache/jit-cache.tgz.part-* >/dev/null 2>&1; then
  mkdir -p ~/.cache && cat .fi-cache/jit-cache.tgz.part-* | tar xz -C ~/.cache && echo "restored JIT cache: $(du -sh ~/.cache/flashinfer | cut -f1)"
fi
# prebuilt modules carried as AOT artifacts (flashinfer/data/aot/<module>/<module>.so load without ninja):
# from an earlier H200 run's JIT cache, or built without a GPU by tests/gpu/prebuild.py
if [ -f .fi-cache/aot.tgz ]; then tar xzf .fi-cache/aot.tgz -C /tmp/site/flashinfer/data/ && echo "AOT modules: $(ls /tmp/site/flashinfer/data/aot | wc -l)"
  # a module that does not load here (built elsewhere: another CUDA or tvm-ffi) is removed, so the JIT rebuilds it
  python3 - <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import pathlib, shutil, tvm_ffi, flashinfer
aot = pathlib.Path("/tmp/site/flashinfer/data/aot")
stamp = aot / "FLASHINFER_VERSION"
built_for = stamp.read_text().strip() if stamp.exists() else flashinfer.__version__
if built_for != flashinfer.__version__:  # same module names, other sources: never load them
    print(f"AOT modules were built for FlashInfer {built_for}, this is {flashinfer.__version__}: all removed")
    shutil.rmtree(aot)
    aot.mkdir()
bad = []
for so in sorted(aot.glob("*/*.so")):
    try:
        tvm_ffi.load_module(str(so))
    except Exception as e:  # noqa: BLE001
        bad.append(so.parent.name); print(f"AOT module does not load, removed: {so.parent.name}: {str(e).splitlines()[0][:160]}")
        shutil.rmtree(so.parent)
print(f"AOT modules loaded: {len(list(aot.glob('*/*.so')))}, removed {len(bad)}")
PY
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 3; }
# the grids of the sweep steps and of the fp8 step (prebuild-bg builds their modules)
SWEEP_GRID="--scenario draft-extend --kv-len 4096 --batch-size 16,64"
FP8_GRID="--scenario draft-extend --batch-size 2,16 --q-len 4 --kv-len 1024 --kv-dtype fp8 --q-dtype dtype,fp8 --kernels trtllm-decode,trtllm-fmha-v2,fa2-prefill,decode-wrapper"
ADAPTIVE_KV=512,4096,32768  # the adaptive benchmark's grid: --scenario draft-extend at these KV lengths
POWER_GRID="--scenario draft-extend --kv-len 4096 --batch-size ${POWER_BS:-16,64} --power both"
step() { local name=$1 limit=$2; shift 2; echo "=== $name: $*" | tee -a "$OUT/summary.txt"; local t0=$SECONDS
  timeout "$limit" "$@" > "/tmp/res/logs/$name.txt" 2>&1; local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
  pack; return 0; }  # after every step: a call cut short keeps what ran
# results.tgz: every log and run folder but the adaptive benchmark's, which goes in adaptive.tgz (each returned
# file must stay under 16 MiB). A machine gone cold between calls: carry them back as .gpu-carry/*.tgz.
pack() { tar czf "$OUT/results.tgz" -C /tmp --exclude res/adaptive res
  if [ -d /tmp/res/adaptive ]; then tar czf "$OUT/adaptive.tgz" -C /tmp res/adaptive; fi; }
# a sweep a later call may finish: resumed when its run folder exists (a call cut short), else started
resumable() { local name=$1 limit=$2 runs=$3; shift 3
  if ls -d $runs >/dev/null 2>&1; then step "$name-resume" "$limit" bash -c "kbench sweep --resume $runs"
  else step "$name" "$limit" "$@"; fi; }
power_table() { step power-table 60 bash -c 'python3 tests/gpu/power_states.py /tmp/res/power1-2* /tmp/res/power2-2*'
  tail -n 40 /tmp/res/logs/power-table.txt >> "$OUT/summary.txt"; }
# --skip-old-files: on a machine still warm, the newer files there win (a second h200.sh in one call must not
# put back the older run folders it was carried)
for t in .gpu-carry/*.tgz; do [ -f "$t" ] && tar xzf "$t" --skip-old-files -C /tmp && echo "restored $t (files not already there)"; done
for s in "$@"; do
  case "$s" in
    env) step env 120 bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; kbench env; kbench kernels' ;;
    sweep) step sweep "${SWEEP_LIMIT:-330}" kbench sweep $SWEEP_GRID --out /tmp/res --name de-kv4096 ;;
    sweep2) step sweep2 "${SWEEP_LIMIT:-330}" kbench sweep $SWEEP_GRID --out /tmp/res --name de-kv4096-devices0 --devices 0 ;;
    repeat) S="kbench sweep $SWEEP_GRID --out /tmp/res"
      step rep1 "${SWEEP_LIMIT:-330}" $S --name rep1
      step rep2 "${SWEEP_LIMIT:-330}" $S --name rep2 --devices 0
      step compare 60 bash -c 'python3 tests/gpu/compare_runs.py /tmp/res/rep1-* /tmp/res/rep2-2*'
      step gate-repeat 60 bash -c 'kbench gate --baseline /tmp/res/rep1-* --candidate /tmp/res/rep2-2* --markdown /tmp/res/gate-repeat.md' ;;
    slow) step slow "${SWEEP_LIMIT:-330}" kbench sweep --scenario draft-extend --kv-len 4096 --batch-size 16 --out /tmp/res --name slow --slow-kernel fa2-prefill=2
      step gate-slow 60 bash -c 'kbench gate --baseline /tmp/res/rep1-* --candidate /tmp/res/slow-* --allow-missing --markdown /tmp/res/gate-slow.md' ;;
    fault) F="--batch-size 16 --q-len 2,4 --kv-len 1024 --kernels trtllm-decode,test-oob-write,fa2-prefill --out /tmp/res"
      step fault-isolated 200 kbench sweep $F --name fault-isolated
      step fault-inproc 200 bash -c "kbench sweep $F --name fault-inproc --no-isolate; echo rc=\$?; kbench sweep --resume /tmp/res/fault-inproc-*"
      step fault-rows 60 bash -c 'python3 tests/gpu/rows_brief.py /tmp/res/fault-*' ;;
    ceiling) step ceiling 120 bash -c 'python3 tests/gpu/ceiling.py /tmp/res results/baselines/h200-draft-extend-kv4096 $(ls -d /tmp/res/adaptive/*-2* 2>/dev/null)'
      tail -n 30 /tmp/res/logs/ceiling.txt >> "$OUT/summary.txt" ;;
    adaptive) step adaptive "${ADAPTIVE_LIMIT:-3000}" python3 tests/gpu/adaptive_bench.py --out /tmp/res/adaptive --kv-len $ADAPTIVE_KV
      tail -n 40 /tmp/res/logs/adaptive.txt >> "$OUT/summary.txt" ;;
    adaptive-full) # the same in parts, for calls with a time limit: the full grid (a later call resumes it) ...
      resumable adaptive-full "${ADAPTIVE_LIMIT:-540}" "/tmp/res/adaptive/full-2*" \
        kbench sweep --scenario draft-extend --kv-len $ADAPTIVE_KV --out /tmp/res/adaptive --name full
      tail -n 4 /tmp/res/logs/adaptive-full*.txt >> "$OUT/summary.txt" ;;
    adaptive-run) # ... the adaptive sweep of it (resumed likewise) ...
      resumable adaptive-run "${ADAPTIVE_LIMIT:-540}" "/tmp/res/adaptive/adaptive-2*" \
        python3 tests/gpu/adaptive_bench.py --only adaptive --out /tmp/res/adaptive --kv-len $ADAPTIVE_KV ;;
    adaptive-table) # ... and the table of the two
      step adaptive-table 120 bash -c 'python3 tests/gpu/adaptive_bench.py --full /tmp/res/adaptive/full-2* --adaptive /tmp/res/adaptive/adaptive-2*'
      tail -n 40 /tmp/res/logs/adaptive-table.txt >> "$OUT/summary.txt" ;;
    probe) step probe 300 python3 tests/gpu/probe_noise.py /tmp/res/probe ;;
    validate) step validate "${VALIDATE_LIMIT:-150}" kbench validate-timer --out /tmp/res/validate-timer.json ;;
    realistic|realistic-core|real-skip|real-table)
      R="--out /tmp/res --budget 0.5 --kernels trtllm-decode,trtllm-decode-ragged,fa2-prefill --kv-len 4096 --batch-size 16,64"
      if [ "$s" = realistic ] || [ "$s" = realistic-core ]; then
        step real-kv "${REAL_LIMIT:-300}" kbench sweep --scenario draft-extend --q-len 4,8 --kv-dist fixed,lognormal:1.0 --name real-kv $R
        step real-accept "${REAL_LIMIT:-300}" kbench sweep --scenario draft-extend --q-len 4,8 --q-dist accept:0.7 --name real-accept $R
        step real-gptoss "${REAL_LIMIT:-300}" kbench sweep --scenario gpt-oss --q-len 4 --name real-gptoss $R
        step real-msl "${REAL_LIMIT:-300}" kbench sweep --scenario draft-extend --q-len 4 --max-seq-len tight,context:131072 --name real-msl $R
      fi
      if [ "$s" = realistic ] || [ "$s" = real-skip ]; then
        step real-skip "${REAL_LIMIT:-300}" kbench sweep --scenario draft-extend --q-len 4 --skip-softmax off,1000 --kernels trtllm-fmha-v2,fa2-prefill,trtllm-decode --out /tmp/res --budget 0.5 --kv-len 4096 --batch-size 16,64 --name real-skip
      fi
      if [ "$s" = realistic ] || [ "$s" = real-table ]; then
        step real-table 60 bash -c 'python3 tests/gpu/realistic.py /tmp/res/realistic.txt /tmp/res/real-*-2*'
        cat /tmp/res/realistic.txt >> "$OUT/summary.txt" 2>/dev/null
      fi ;;
    power) step power1 "${POWER_LIMIT:-280}" kbench sweep $POWER_GRID --out /tmp/res --name power1
      step power2 "${POWER_LIMIT:-280}" kbench sweep $POWER_GRID --out /tmp/res --name power2
      power_table ;;
    power-1|power-2) # the same in parts, one sweep per call (each ~6.5 min: two do not fit a 10-minute call);
      # a sweep cut short is resumed by the next call with the same word; power-table compares the two
      name=power${s#power-}
      resumable "$name" "${POWER_LIMIT:-540}" "/tmp/res/$name-2*" kbench sweep $POWER_GRID --out /tmp/res --name "$name" ;;
    power-table) power_table ;;
    tree) step tree "${TREE_LIMIT:-330}" python3 tests/gpu/tree_check.py --out /tmp/res/tree  # issue #26
      tail -n 60 /tmp/res/logs/tree.txt >> "$OUT/summary.txt" ;;
    fp8) step fp8 "${STEP_LIMIT:-300}" kbench sweep $FP8_GRID --out /tmp/res --name fp8q
      step fp8-rows 60 bash -c 'python3 tests/gpu/rows_brief.py /tmp/res/fp8q-*' ;;
    tests) step tests "${TESTS_LIMIT:-200}" python3 -m pytest -m gpu tests/test_gpu_kernels.py -q -rs ;;
    prebuild-bg) # compile, in the background, the modules the sweep and fp8 steps need that the carried AOT lacks
      echo "=== prebuild-bg started" | tee -a "$OUT/summary.txt"
      python3 tests/gpu/prebuild.py --parallel 3 --out /tmp/aot-gpu.tgz "$FP8_GRID" "$SWEEP_GRID" > /tmp/res/logs/prebuild.txt 2>&1 &
      echo $! > /tmp/prebuild.pid ;;
    prebuild-wait) t0=$SECONDS  # at most PREBUILD_WAIT s (a step that needs a module still compiling then waits on its lock)
      while kill -0 "$(cat /tmp/prebuild.pid 2>/dev/null)" 2>/dev/null && [ $((SECONDS - t0)) -lt "${PREBUILD_WAIT:-420}" ]; do sleep 2; done
      echo "=== prebuild-wait: $((SECONDS - t0)) s; $(grep -c ' ok ' /tmp/res/logs/prebuild.txt) built, $(grep -c FAILED /tmp/res/logs/prebuild.txt) failed" | tee -a "$OUT/summary.txt" ;;
    cache) du -sh ~/.cache/flashinfer; (cd ~/.cache && tar czf /tmp/jit-cache.tgz flashinfer) && split -b 15m /tmp/jit-cache.tgz "$OUT/jit-cache.tgz.part-" ;;
    *) step "custom$((++n))" "${STEP_LIMIT:-300}" bash -c "$s" ;;
  esac
done
pack
ls -la "$OUT"
