#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# writes.sh: writes that fail are errors, and no write is
# done twice.
# - --log-json on a full device (/dev/full: every write fails with ENOSPC)
#   ends the run with exit 1 and an error naming --log-json and the step,
#   on one rank and on 2 (t=2); it used to exit 0 with the log cut short.
# - SIGTERM landing on a step that ends with a periodic save (--save-every
#   1): the run stops after that step with exit 75 and saves it once, not
#   twice.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 --microbatch 2"
corpus_shards
for layout in one tp2; do
  extra=
  [ $layout = tp2 ] && extra="--tp 2"
  expect_error "$layout: --log-json on a full device" "--log-json: write failed at step 1: No space left on device" \
    "$SHARDC" run $MODEL $extra --out prog-$layout --data train.bin --steps 20 --log-json /dev/full
done

SHARDC_FAULT=0:5:slow "$SHARDC" run $MODEL --out prog-one --data train.bin --steps 1000 \
  --save-every 1 --save ck --log-every 1 >pre.txt 2>&1 </dev/null &
pid=$!
for _ in $(seq 100); do grep -q "^step 4/" pre.txt 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -TERM $pid || true
st=0; wait $pid || st=$?
saves=$({ grep -c "^saved ck (step 5)" pre.txt || true; })
echo "      SIGTERM during step 5 with --save-every 1: exit $st, step 5 saved $saves time(s): $(grep -m1 '^stopped' pre.txt)"
check "a preemption on a periodic save: exit 75, step 5 saved once" \
  sh -c "[ $st -eq 75 ] && [ $saves -eq 1 ] && grep -q '^stopped by SIGTERM after step 5 ' pre.txt"
finish
