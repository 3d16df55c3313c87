#!/bin/sh
# simulate says when a configuration does not fit and by how much: the 1T
# model on 3072 A100s without recomputation needs far more than 80 GiB
# per GPU (the text says "does not fit" with the GiB over, the JSON
# fits: false with memory_over_bytes, stderr a warning), and with full
# recomputation, as the paper ran it (examples/sc21/run_table_1.sh: 1F1B
# without interleaving), it fits and nothing warns. Prints the lines it
# checks.
#   fit.sh SHARDC MODEL
set -u
shardc=$1
model=$2
fail=0
tmp=${TMPDIR:-/tmp}/planner_fit.$$
run() {
  "$shardc" simulate "$model" -D layers=128 -D hidden=25600 -D heads=160 --tp 8 --pp 64 --dp 6 \
    --microbatch 1 --global-batch 3072 --hw a100 "$@" >"$tmp.out" 2>"$tmp.err"
}
run
status=$?
grep "memory per GPU\|does not fit" "$tmp.out"
cat "$tmp.err"
[ $status = 0 ] || { echo "FAIL: exit $status"; fail=1; }
grep -q "^does not fit " "$tmp.out" || { echo "FAIL: no 'does not fit' line"; fail=1; }
grep -q "warning: does not fit" "$tmp.err" || { echo "FAIL: no warning"; fail=1; }
run --json
over=$(sed -n 's/.*"memory_over_bytes":[[:space:]]*\([0-9.e+]*\).*/\1/p' "$tmp.out")
echo "json: $(grep '"fits"' "$tmp.out" | tr -d " ,\t") memory_over_bytes $over"
grep -q "\"fits\":[[:space:]]*false" "$tmp.out" || { echo "FAIL: fits is not false"; fail=1; }
awk -v o="$over" 'BEGIN { exit !(o > 100 * 1073741824) }' || { echo "FAIL: over by under 100 GiB"; fail=1; }
run --recompute full
grep "memory per GPU" "$tmp.out"
if grep -q "does not fit" "$tmp.out" "$tmp.err"; then echo "FAIL: full recomputation does not fit"; fail=1; fi
rm -f "$tmp.out" "$tmp.err"
[ $fail = 0 ] && echo ok
exit $fail
