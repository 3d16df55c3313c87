#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# watchdog_load.sh: the watchdog is never wrong under disk
# contention. Two dd loops write and fsync 32 MiB files beside the job
# folder for the whole test (bounded: at most 150 s, removed at the end).
# Under that load, on 4 ranks (t=2 x p=2) with --timeout 5:
# - two healthy jobs of 1500 steps with a checkpoint every 250 steps and a
#   JSON log each finish with exit 0, print `final`, and no rank is
#   blamed (the heartbeats travel in shared memory, abi/job.h; a record
#   write that blocks delays no beat);
# - side by side, a rank killed with SIGKILL and a rank stopped with
#   SIGSTOP still end the job within --timeout, naming that rank and the
#   step it was in.
# Prints each run's exit, its time and the load's write rate.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 --microbatch 2"
L4="--tp 2 --pp 2 --global-batch 4"
corpus_shards
check "the program builds" "$SHARDC" run $MODEL $L4 --out prog --steps 0

# The load: two loops of dd with fsync, each stopped by the stop file or
# after 150 s, whatever comes first.
loads=
for k in 1 2; do
  (
    end=$(($(date +%s) + 150))
    n=0
    while [ ! -e stop ] && [ "$(date +%s)" -lt $end ]; do
      dd if=/dev/zero of=load$k.bin bs=1M count=32 conv=fsync 2>/dev/null
      n=$((n + 1))
      echo $n >count$k
    done
    rm -f load$k.bin
  ) &
  loads="$loads $!"
done
stop_load() { touch stop; for p in $loads; do wait "$p" 2>/dev/null || true; done; rm -f load1.bin load2.bin; }
trap 'stop_load; rm -rf "$WORK"' EXIT
t0=$(date +%s.%N)

for try in 1 2; do
  s0=$(date +%s.%N)
  st=0
  "$SHARDC" run $MODEL $L4 --out prog --data train.bin --steps 1500 --save-every 250 \
    --save ck$try --log-json log$try.json --timeout 5 >healthy$try.txt 2>&1 </dev/null || st=$?
  took=$(echo "$(date +%s.%N) - $s0" | bc)
  echo "      healthy job $try under load: exit $st after $took s: $(grep -m1 '^final\|error' healthy$try.txt)"
  check "healthy job $try under load: exit 0, final printed, no rank blamed" \
    sh -c "[ $st -eq 0 ] && grep -q '^final' healthy$try.txt && ! grep -q 'error' healthy$try.txt"
done

for kind in kill stop; do
  rm -rf prog/job-*
  st=0
  SHARDC_FAULT=1:40:$kind timeout 120 "$SHARDC" run $MODEL $L4 --out prog --data train.bin \
    --steps 1000000 --timeout 5 --quiet >$kind.txt 2>&1 </dev/null || st=$?
  end=$(date +%s.%N)
  at=$(sed -n 's/^fault injected: .* at \([0-9.]*\)$/\1/p' $kind.txt)
  took=$(echo "$end - ${at:-$end}" | bc)
  msg=$(grep -m1 "^shardc: error: rank 1 (" $kind.txt || true)
  echo "      $kind of rank 1 at step 40 under load: exit $st after $took s"
  echo "      $msg"
  check "$kind under load: exit 1 within --timeout 5" \
    sh -c "[ $st -eq 1 ] && [ -n '$at' ] && [ \$(echo '$took <= 5' | bc) -eq 1 ]"
  check "$kind under load: the message names rank 1 and step 40" \
    sh -c "echo '$msg' | grep -q 'rank 1 (tp=1 pp=0 dp=0, program stage0) .*step 40'"
done
elapsed=$(echo "$(date +%s.%N) - $t0" | bc)
# The writers stop first: a count read while its writer rewrites it would
# be empty.
stop_load
c1=$(cat count1 2>/dev/null || true) c2=$(cat count2 2>/dev/null || true)
written=$(( ${c1:-0} + ${c2:-0} ))
echo "      load: $written files of 32 MiB written and fsynced in $elapsed s"
check "the load ran (at least one file written)" test $written -ge 1
finish
