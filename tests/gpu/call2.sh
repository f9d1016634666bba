# call 2: noise probe, validate-timer with the fence, two back-to-back sweeps at --min-time 0.25 gated
S="kbench sweep --scenario draft-extend --kv-len 4096 --batch-size 16,64 --out /tmp/res --min-time 0.25"
VALIDATE_LIMIT=260 bash tests/gpu/h200.sh "python3 tests/gpu/probe_noise.py /tmp/res/probe a" validate \
  "$S --name rep-b1" "$S --name rep-b2" \
  "kbench gate --baseline \$(ls -d /tmp/res/rep-b1-*) --candidate \$(ls -d /tmp/res/rep-b2-*) --markdown /tmp/res/gate-b.md" >/dev/null
cat $OUT/summary.txt
grep -A80 "== part A" /tmp/res/logs/custom1.txt | cut -c1-200; tail -2 /tmp/res/logs/custom1.txt
grep -A45 "kbench timer vs" /tmp/res/logs/validate.txt | cut -c1-230
tail -4 /tmp/res/logs/custom2.txt; tail -4 /tmp/res/logs/custom3.txt; tail -15 /tmp/res/logs/custom4.txt | cut -c1-200
