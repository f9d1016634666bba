# call 5: validate-timer with CUPTI over kbench's own graph replays
VALIDATE_LIMIT=150 bash tests/gpu/h200.sh validate >/dev/null
cat $OUT/summary.txt
grep -A36 "kbench timer vs" /tmp/res/logs/validate.txt | cut -c1-300; tail -3 /tmp/res/logs/validate.txt | cut -c1-300
