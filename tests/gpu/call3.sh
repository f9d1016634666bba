# call 3: two back-to-back sweeps (the second through --devices 0), gate, a slowed sweep, validate-timer, GPU tests
S="kbench sweep --scenario draft-extend --kv-len 4096 --out /tmp/res"
STEP_LIMIT=110 VALIDATE_LIMIT=120 TESTS_LIMIT=100 bash tests/gpu/h200.sh \
  "$S --batch-size 16,64 --name rep-c1" "$S --batch-size 16,64 --name rep-c2 --devices 0" \
  "python3 tests/gpu/compare_runs.py \$(ls -d /tmp/res/rep-c1-*) \$(ls -d /tmp/res/rep-c2-2*)" \
  "kbench gate --baseline \$(ls -d /tmp/res/rep-c1-*) --candidate \$(ls -d /tmp/res/rep-c2-2*) --markdown /tmp/res/gate-c.md" \
  "$S --batch-size 16 --slow-kernel fa2-prefill=2 --name slow" \
  "kbench gate --baseline \$(ls -d /tmp/res/rep-c1-*) --candidate \$(ls -d /tmp/res/slow-*) --allow-missing --markdown /tmp/res/gate-slow.md" \
  validate "python3 -m pytest -m gpu tests/test_gpu_kernels.py -q -rs -k 'timer or oob or fenced or out_of_bounds'" >/dev/null
cat $OUT/summary.txt
for i in 1 2; do grep -E "^(rows|wall|merged|run)" /tmp/res/logs/custom$i.txt; done
cat /tmp/res/logs/custom3.txt | cut -c1-160
for i in 4 6; do grep -E "PASS|FAIL" /tmp/res/logs/custom$i.txt | tail -3 | cut -c1-200; done
grep -E "fa2-prefill|regression" /tmp/res/logs/custom6.txt | head -5 | cut -c1-200
grep -A36 "kbench timer vs" /tmp/res/logs/validate.txt | cut -c1-260
tail -3 /tmp/res/logs/custom7.txt
