#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# hangs.sh: `shardc run` never hangs silently. On 4 ranks (t=2
# x p=2) with --timeout 5:
# - under `ulimit -v 300000` (OpenBLAS cannot reserve its buffers and spins)
#   the job ends with exit 1 and a message naming a rank and the limit,
#   every rank refusing before MPI starts (no rank crashes in Open MPI's
#   start), and under ulimit -v 4000000 it trains; a job of one
#   rank (`shardc run` becomes the program) ends with exit 1 within 10 s
#   and a message naming the limit, and under a limit it fits in it
#   trains as usual;
# - under `ulimit -n 32` (mpirun cannot open its pipes and hangs) the job
#   ends with exit 1 within 40 s, naming a rank that never started;
# - and there SIGTERM to `shardc run` is answered within 5 s, leaving no
#   process of the job.
# The flags of the training program are checked against abi/flags.h, not
# by running the program: the limits hit only the ranks.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
. "$ROOT/tests/features/reliability/job_procs.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 --microbatch 2"
L4="--tp 2 --pp 2 --global-batch 4"
corpus_shards
check "the program builds" "$SHARDC" run $MODEL $L4 --out prog --steps 0

# limited WHAT LIMIT: the job under `ulimit WHAT LIMIT`, bounded by 100 s.
limited() {
  t0=$(date +%s.%N)
  st=0
  (ulimit $1 $2 && exec timeout 100 "$SHARDC" run $MODEL $L4 --out prog --data train.bin \
    --steps 5 --timeout 5 >lim$1.txt 2>&1 </dev/null) || st=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  msg=$(grep -m1 "^shardc: error: rank" lim$1.txt || true)
  echo "      ulimit $1 $2: exit $st after $took s"
  echo "      $msg"
}
if [ -n "${SHARDC_SANITIZED:-}" ]; then
  echo "skip: ulimit -v 300000: a sanitizer build reserves terabytes of address space for its" \
    "shadow memory, so no rank could start under the limit (the Release build runs this check)"
else
  limited -v 300000
  # (test, not sh -c: the message may hold a quote, as "the plan's" does)
  check "ulimit -v 300000: exit 1 with a message naming a rank" test "$st" -eq 1 -a -n "$msg"
  # Every rank refuses before MPI starts (Open MPI's start crashed on a
  # failing mmap, one try in three): the message says why, none crashed.
  check "ulimit -v 300000: the message names the limit and MPI's start" \
    grep -q "address-space limit of 300000 KiB .*MPI's start" lim-v.txt
  check "ulimit -v 300000: no rank died of a signal" sh -c "! grep -q 'killed by signal' lim-v.txt"
  # ... and under a limit the job fits in, the check refuses nothing.
  limited -v 4000000
  check "ulimit -v 4000000 (enough): 4 ranks train" sh -c "[ $st -eq 0 ] && grep -q '^final' lim-v.txt"
  # One rank: the program would spin before its main, unwatched.
  check "one rank builds" "$SHARDC" run $MODEL --out one --steps 0
  for lim in 300000 4000000; do
    t0=$(date +%s.%N)
    st=0
    (ulimit -v $lim && exec timeout 100 "$SHARDC" run $MODEL --out one --data train.bin \
      --steps 3 >one-$lim.txt 2>&1 </dev/null) || st=$?
    took=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "      one rank under ulimit -v $lim: exit $st after $took s: $(grep -m1 'error' one-$lim.txt)"
    if [ $lim = 300000 ]; then
      check "one rank, ulimit -v $lim: exit 1 within 10 s naming the limit" \
        sh -c "[ $st -eq 1 ] && [ \$(echo '$took < 10' | bc) -eq 1 ] && grep -q 'address-space limit of 300000 KiB' one-$lim.txt"
    else
      check "one rank, ulimit -v $lim (enough): trains" sh -c "[ $st -eq 0 ] && grep -q '^final' one-$lim.txt"
    fi
  done
fi
limited -n 32
check "ulimit -n 32: exit 1 within 40 s" sh -c "[ $st -eq 1 ] && [ \$(echo '$took < 40' | bc) -eq 1 ]"
check "ulimit -n 32: the message names a rank that never started" \
  sh -c "echo '$msg' | grep -q 'never started: no record after'"
(ulimit -n 32 && exec "$SHARDC" run $MODEL $L4 --out prog --data train.bin --steps 5 --timeout 0 \
  >term.txt 2>&1 </dev/null) &
pid=$!
sleep 3
t0=$(date +%s.%N)
kill -TERM $pid || true
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
took=$(echo "$(date +%s.%N) - $t0" | bc)
kill -0 $pid 2>/dev/null && kill -KILL $pid
st=0; wait $pid || st=$?
left=$(job_procs prog/stage)
echo "      SIGTERM to shardc run while mpirun hangs (--timeout 0): exit $st after $took s, $left processes left"
check "SIGTERM while mpirun hangs: answered within 5 s" sh -c "[ \$(echo '$took < 5' | bc) -eq 1 ] && [ $st -ne 137 ]"
check "  no process of the job left" test "$left" -eq 0
finish
