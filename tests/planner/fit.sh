#!/bin/bash
# simulate says when a configuration does not fit and by how much: the 1T
# model on 3072 A100s without recomputation needs far more than 80 GiB
# per GPU (the text says "does not fit" with the GiB over, the JSON
# fits: false with memory_over_bytes, stderr a warning), and with full
# recomputation, as the paper ran it (examples/sc21/run_table_1.sh: 1F1B
# without interleaving), it fits and nothing warns. Prints the lines it
# checks.
#   fit.sh MODEL
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
model=$1
# run [FLAGS...]: the 1T configuration into sim.out and sim.err; its exit
# status in status.
run() {
  status=0
  "$SHARDC" simulate "$model" -D layers=128 -D hidden=25600 -D heads=160 --tp 8 --pp 64 --dp 6 \
    --microbatch 1 --global-batch 3072 --hw a100 "$@" >sim.out 2>sim.err || status=$?
}
run
grep "memory per GPU\|does not fit" sim.out || true
cat sim.err
check "without recomputation: exit 0" test "$status" -eq 0
check "without recomputation: a 'does not fit' line" grep -q "^does not fit " sim.out
check "without recomputation: a warning on stderr" grep -q "warning: does not fit" sim.err
run --json
over=$(sed -n 's/.*"memory_over_bytes":[[:space:]]*\([0-9.e+]*\).*/\1/p' sim.out)
echo "json: $(grep '"fits"' sim.out | tr -d " ,\t" || true) memory_over_bytes $over"
check "json: fits is false" grep -q "\"fits\":[[:space:]]*false" sim.out
check "json: over by more than 100 GiB ($over bytes)" \
  awk -v o="$over" 'BEGIN { exit !(o > 100 * 1073741824) }'
run --recompute full
grep "memory per GPU" sim.out || true
check "full recomputation: exit 0" test "$status" -eq 0
check "full recomputation: fits, no warning" \
  sh -c '! grep -q "does not fit" sim.out sim.err'
finish
