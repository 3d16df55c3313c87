#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# keep_last.sh: --keep-last 2 with a checkpoint every step.
# An uninterrupted run of 6 steps leaves DIR/step-00000005 and
# DIR/step-00000006 and DIR/latest naming the second. Then the same run is
# killed 50 times at random moments of its checkpoint writing
# (RT_FAULT_AFTER_BYTES, exit 3): each time DIR/latest names a complete
# checkpoint (or none exists yet), at most K + 1 step folders exist, and
# --resume DIR ends with the uninterrupted run's log (every loss and
# gradient norm to the bit) and its final weights byte for byte.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
corpus_shards
check "compile a tiny gpt2" "$SHARDC" compile "$ROOT/models/gpt2.shard" -D vocab=256 -D seq=8 \
  -D hidden=16 -D heads=4 -D layers=2 -D batch=2 -D dropout_rate=0.1 --target cpu -o prog
check "build it" "$SHARDC" build prog
P=prog/rank0
F="--data train.bin --steps 6 --global-batch 4 --warmup 2 --lr 1e-2 --save-every 1 --keep-last 2 --quiet"
check "the uninterrupted run" $P $F --save ref --log-json ref.json
echo "      left: $(ls ref | tr '\n' ' ')| latest: $(cat ref/latest)"
check "it keeps the 2 newest step folders and points at the last" \
  sh -c '[ "$(ls ref | tr "\n" " ")" = "latest step-00000005 step-00000006 " ] && [ "$(cat ref/latest)" = step-00000006 ]'
strip_timing ref.json >ref.clean
one=$(($(wc -c <ref/step-00000006/state.safetensors) + $(wc -c <ref/step-00000006/model.safetensors)))
total=$((6 * one))
echo "      checkpoint bytes of the run: $total (6 saves of $one)"

fresh=0 resumed=0 bad=0 i=1
while [ $i -le 50 ]; do
  n=$(awk -v s=$i -v t=$total 'BEGIN { srand(s); print 1 + int(rand() * (t - 1)) }')
  rm -rf k k.json
  st=0; RT_FAULT_AFTER_BYTES=$n $P $F --save k --log-json k.json >kill.txt 2>&1 || st=$?
  save=$((n / one + 1))
  latest=$(cat k/latest 2>/dev/null || true)
  folders=$({ ls -d k/step-* 2>/dev/null || true; } | wc -l)
  if [ $st -ne 3 ]; then
    bad=$((bad + 1)); echo "      kill $i at byte $n: exit $st, not 3"
  elif [ "$folders" -gt 3 ]; then
    bad=$((bad + 1)); echo "      kill $i at byte $n: $folders step folders"
  elif [ -n "$latest" ]; then
    resumed=$((resumed + 1))
    $P --resume k --log-json k.json --quiet >res.txt 2>&1 || {
      bad=$((bad + 1)); echo "      kill $i at byte $n: resume failed: $(head -2 res.txt)"; }
  else
    fresh=$((fresh + 1))
    $P $F --save k --log-json k.json >res.txt 2>&1 || bad=$((bad + 1))
  fi
  strip_timing k.json >k.clean 2>/dev/null || true
  if ! cmp -s k.clean ref.clean || ! cmp -s k/step-00000006/model.safetensors ref/step-00000006/model.safetensors; then
    bad=$((bad + 1)); echo "      kill $i at byte $n (save $save, latest ${latest:-none}): another result"
  fi
  [ $i -le 8 ] && echo "      kill $i: at byte $n, in save $save: exit $st, latest ${latest:-none}, $folders folder(s)"
  i=$((i + 1))
done
echo "      50 kills: $resumed resumed from the newest complete checkpoint, $fresh before any was complete, $bad wrong"
check "every kill left a loadable newest checkpoint and the same losses and weights" test $bad -eq 0
finish
