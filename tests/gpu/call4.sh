# call 4: validate-timer (duty-cycled CUPTI) and the whole GPU test file
VALIDATE_LIMIT=120 TESTS_LIMIT=270 bash tests/gpu/h200.sh validate tests >/dev/null
cat $OUT/summary.txt
grep -A36 "kbench timer vs" /tmp/res/logs/validate.txt | cut -c1-260
tail -12 /tmp/res/logs/tests.txt | cut -c1-200
