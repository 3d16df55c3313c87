#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# launcher_death.sh: the ranks die with their launcher. A
# 4-rank job (t=2 x p=2) saving every 5 steps, once it runs:
# - `shardc run` killed with SIGKILL, and with SIGHUP: within 3 s no
#   process of the job is left (mpirun gets SIGTERM from its parent's
#   death, the ranks' watchdogs see the launcher gone), and the checkpoint
#   folder no longer changes;
# - mpirun killed with SIGTERM, and with SIGKILL: `shardc run` says that
#   mpirun was killed, by which signal, exits non-zero, and leaves no
#   process of the job.
# Prints the time from the kill to the last process gone.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
. "$ROOT/tests/features/reliability/job_procs.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 --microbatch 2"
corpus_shards
L4="--tp 2 --pp 2 --global-batch 4"
check "the program builds" "$SHARDC" run $MODEL $L4 --out prog --steps 0

# job LABEL: starts the job in the background ($job: shardc run's pid)
# and waits for its step 20.
job() {
  "$SHARDC" run $MODEL $L4 --out prog --data train.bin --steps 1000000 --save-every 5 \
    --save ck-$1 --log-every 1 >$1.txt 2>&1 </dev/null &
  job=$!
  for _ in $(seq 300); do grep -q "^step 20/" $1.txt && return; sleep 0.1; done
}

procs() { job_procs prog/stage; }

# gone LABEL: seconds until no process of the job is left (at most 5).
gone() {
  t0=$(date +%s.%N)
  for _ in $(seq 50); do [ "$(procs)" -eq 0 ] && break; sleep 0.1; done
  echo "$(date +%s.%N) - $t0" | bc
}

for sig in KILL HUP; do
  job $sig
  kill -$sig $job || true
  wait $job 2>/dev/null || true
  took=$(gone)
  left=$(procs)
  before=$(ls -l --time-style=+%s.%N ck-$sig | md5sum || true)
  sleep 1
  after=$(ls -l --time-style=+%s.%N ck-$sig | md5sum || true)
  echo "      shardc run killed with SIG$sig: $left processes left after $took s; ranks said: $(grep -m1 'launcher' $sig.txt)"
  check "SIG$sig to shardc run: no process of the job left within 3 s" \
    sh -c "[ $left -eq 0 ] && [ \$(echo '$took < 3' | bc) -eq 1 ]"
  check "SIG$sig to shardc run: the checkpoint folder no longer changes" test "$before" = "$after"
done

for sig in TERM KILL; do
  job mpi$sig
  mpi=$(ps -o pid= --ppid $job | head -1 | tr -d " " || true)
  kill -$sig $mpi || true
  st=0; wait $job || st=$?
  took=$(gone)
  left=$(procs)
  msg=$(grep -m1 "mpirun (pid" mpi$sig.txt || true)
  echo "      mpirun (pid $mpi) killed with SIG$sig: shardc run exit $st, $left processes left after $took s"
  echo "      $msg"
  check "SIG$sig to mpirun: shardc run exits non-zero" test $st -ne 0
  check "SIG$sig to mpirun: it says that mpirun ended before the job" \
    sh -c "grep -q 'shardc: error: mpirun (pid $mpi) .* before the job ended' mpi$sig.txt"
  check "SIG$sig to mpirun: no process of the job left" test $left -eq 0
done
finish
