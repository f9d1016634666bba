F="--batch-size 16 --q-len 2,4 --kv-len 1024 --kernels trtllm-decode,test-oob-write,fa2-prefill --out /tmp/res"
bash tests/gpu/h200.sh env "python3 tests/gpu/probe_noise.py /tmp/res/probe" \
  "kbench sweep $F --name fault-isolated; echo rc=\$?" \
  "kbench sweep $F --name fault-inproc --no-isolate; echo rc=\$?; kbench sweep --resume \$(ls -d /tmp/res/fault-inproc-*); echo rc=\$?" \
  sweep >/dev/null
cat $OUT/summary.txt
grep -A40 "== part B" /tmp/res/logs/custom1.txt; grep -A40 "== part A" /tmp/res/logs/custom1.txt; tail -3 /tmp/res/logs/custom1.txt
grep -E "rc=|stopped|illegal|restart" /tmp/res/logs/custom2.txt /tmp/res/logs/custom3.txt | cut -c1-220
python3 tests/gpu/rows_brief.py /tmp/res/fault-isolated-* /tmp/res/fault-inproc-*
tail -5 /tmp/res/logs/sweep.txt
