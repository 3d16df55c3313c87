#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# data_attacks.sh: bad data ends a run with a clear error
# naming the file, never a hang or a crash.
# - A FIFO as --data, on 1 rank and on 2 (t=2): refused at once as not a
#   regular file, naming it (no writer ever comes).
# - The data file replaced mid-run by one of another vocabulary (ids up to
#   97 for a model of 64): exit 1 naming the file, not an abort; the same
#   with the file rewritten in place (same inode, tokens changed), and
#   with its modification time put back (the ids themselves are checked at
#   every read: the crash behind --dump-grads over the data is gone too).
# - The same replacement in a run that saves only at its end, on 1 rank and
#   on t=2: the run saves the last step it finished before it fails (the
#   next step's window is read ahead, so the change is found a step
#   early), the message says so, the checkpoint holds that step, and
#   --resume with the file restored trains on to the end.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=64 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 --microbatch 2"
# shard FILE TOP N: N tokens with ids below TOP, in llm.c's format.
shard() {
  python3 -c '
import struct, sys
path, top, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = [20240520, 1, n] + [0] * 253
open(path, "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % n, *[(i * 7 + 3) % top for i in range(n)]))' "$@"
}
shard small.bin 64 20000
shard wide.bin 98 20000
check "the program builds (vocabulary 64)" "$SHARDC" run $MODEL --out prog --steps 0
check "2 ranks build" "$SHARDC" run $MODEL --tp 2 --out prog2 --steps 0

mkfifo fifo.bin
for layout in one tp2; do
  extra= out=prog
  [ $layout = tp2 ] && extra="--tp 2" out=prog2
  t0=$(date +%s.%N)
  st=0; timeout 60 "$SHARDC" run $MODEL $extra --out $out --data fifo.bin --steps 5 >fifo-$layout.txt 2>&1 </dev/null || st=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  echo "      $layout: a FIFO as --data: exit $st after $took s: $(grep -m1 error fifo-$layout.txt)"
  check "$layout: a FIFO as --data is refused, naming it, within 10 s" \
    sh -c "[ $st -eq 1 ] && grep -q 'fifo.bin: not a regular file' fifo-$layout.txt && [ \$(echo '$took < 10' | bc) -eq 1 ]"
done

# replaced HOW: the run reads small.bin (as train.bin); during its slowed
# step 3 the file is replaced (mv: another inode) or rewritten in place.
for how in replaced rewritten; do
  cp small.bin train.bin
  SHARDC_FAULT=0:3:slow "$SHARDC" run $MODEL --out prog --data train.bin --steps 50 --no-shuffle \
    >$how.txt 2>&1 </dev/null &
  pid=$!
  for _ in $(seq 100); do grep -q "^step 1/" $how.txt 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  if [ $how = replaced ]; then cp wide.bin new.bin && mv new.bin train.bin; else cat wide.bin >train.bin; fi
  st=0; wait $pid || st=$?
  echo "      the data file $how mid-run: exit $st: $(grep -m1 error $how.txt)"
  check "data $how mid-run: exit 1 naming the file" \
    sh -c "[ $st -eq 1 ] && grep -q 'shardc: error: train.bin: the file changed while the run reads it' $how.txt"
done
# Rewritten with the same size and its times put back: the ids are checked.
cp small.bin train.bin
touch -r small.bin train.bin
SHARDC_FAULT=0:3:slow "$SHARDC" run $MODEL --out prog --data train.bin --steps 50 --no-shuffle \
  >ids.txt 2>&1 </dev/null &
pid=$!
for _ in $(seq 100); do grep -q "^step 1/" ids.txt 2>/dev/null && break; sleep 0.1; done
sleep 0.5
cat wide.bin >train.bin
touch -r small.bin train.bin
st=0; wait $pid || st=$?
echo "      rewritten in place with its time put back: exit $st: $(grep -m1 error ids.txt)"
check "ids outside the vocabulary read mid-run: exit 1 naming the file and the id" \
  sh -c "[ $st -eq 1 ] && grep -q 'shardc: error: train.bin: token [0-9]* has id [0-9]*, outside the vocabulary of 64' ids.txt"

meta() { python3 "$ROOT/tests/features/reliability/st_meta.py" "$@"; }
for layout in one tp2; do
  extra= out=prog
  [ $layout = tp2 ] && extra="--tp 2" out=prog2
  cp small.bin train.bin
  rm -rf ck-$layout
  SHARDC_FAULT=0:3:slow "$SHARDC" run $MODEL $extra --out $out --data train.bin --steps 8 \
    --no-shuffle --save ck-$layout >saved-$layout.txt 2>&1 </dev/null &
  pid=$!
  for _ in $(seq 100); do grep -q "^step 1/" saved-$layout.txt 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  cp wide.bin new.bin && mv new.bin train.bin
  st=0; wait $pid || st=$?
  step=$(meta ck-$layout/state.safetensors step 2>/dev/null || true)
  echo "      $layout: the data replaced in a run that saves at its end: exit $st, checkpoint at step '$step': $(grep -m1 'error:.*train.bin' saved-$layout.txt)"
  check "$layout: data replaced: exit 1, naming the file and the step saved first" \
    sh -c "[ $st -eq 1 ] && grep -q 'train.bin: the file changed while the run reads it.*saved it first' saved-$layout.txt"
  check "$layout: the checkpoint holds the last step run (3 or 4), not nothing" \
    sh -c "[ '$step' = 3 ] || [ '$step' = 4 ]"
  cp small.bin train.bin
  st=0
  "$SHARDC" run $MODEL $extra --out $out --data train.bin --steps 8 --no-shuffle \
    --resume ck-$layout >resumed-$layout.txt 2>&1 </dev/null || st=$?
  echo "      $layout: resumed with the file restored: exit $st, $(grep -m1 '^final' resumed-$layout.txt)"
  check "$layout: the resume with the file restored trains to the end" \
    sh -c "[ $st -eq 0 ] && grep -q '^step 8/8' resumed-$layout.txt"
done
finish
