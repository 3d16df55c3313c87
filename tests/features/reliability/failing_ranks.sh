#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# failing_ranks.sh: on 4 ranks (t=2 x p=2) and 8 (t=2 x p=2 x
# d=2), a rank that raises an error, one killed with SIGKILL, one stopped
# with SIGSTOP and one that spins without progress (SHARDC_FAULT, see
# runtime/main.c) each end the whole job within --timeout: shardc run exits
# 1 with one message naming the rank, its coordinates and why (the signal
# that killed it, the error, what it was doing), every other
# rank exits with status 1 (its record says so), no rank process is left,
# and none of mpirun's banners shows. Prints the kill points, the exit
# codes and the time from the fault to the end of the job.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
. "$ROOT/tests/features/reliability/job_procs.sh"
TIMEOUT=5
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 --microbatch 2"
corpus_shards

# run LABEL RANKS FAULT_RANK STEP KIND WANT LAYOUT...
run() {
  label=$1 n=$2 rank=$3 step=$4 kind=$5 want=$6; shift 6
  rm -rf "prog-$label"/job-*
  st=0
  SHARDC_JOB_KEEP=1 SHARDC_FAULT=$rank:$step:$kind timeout 120 "$SHARDC" run $MODEL "$@" \
    --out "prog-$label" --data train.bin --steps 1000000 --quiet --timeout $TIMEOUT \
    >"$label.txt" 2>&1 </dev/null || st=$?
  end=$(date +%s.%N)
  at=$(sed -n 's/^fault injected: .* at \([0-9.]*\)$/\1/p' "$label.txt")
  took=$(echo "$end - ${at:-$end}" | bc)
  echo "      $label: kill point rank $rank at step $step ($kind): exit $st after $took s"
  msg=$(grep "^shardc: error: rank $rank (" "$label.txt" || true)
  echo "      $msg"
  check "$label: exit status 1" test "$st" -eq 1
  check "$label: the fault happened" test -n "$at"
  check "$label: the job ended within --timeout $TIMEOUT (${took} s)" \
    sh -c "[ \$(echo '$took <= $TIMEOUT' | bc) -eq 1 ]"
  check "$label: one message names rank $rank, its coordinates and '$want'" \
    sh -c "[ \$(grep -c '^shardc: error: rank [0-9]* (' '$label.txt') -eq 1 ] && \
           echo '$msg' | grep -q 'rank $rank (tp=[01] pp=[01] dp=[01], program stage[01]) $want'"
  check "$label: no banner of mpirun" sh -c "! grep -q 'mpirun noticed\|MPI_ABORT\|Primary job' '$label.txt'"
  others=0 good=0 left=0
  for rec in "prog-$label"/job-*/rank-*; do
    case $rec in *.exit | *.end) continue ;; esac
    r=${rec##*rank-}
    pid=$(sed -n 's/^pid //p' "$rec")
    kill -0 "$pid" 2>/dev/null && left=$((left + 1))
    [ "$r" = "$rank" ] && continue
    others=$((others + 1))
    grep -q '^status 1$' "$rec" && good=$((good + 1))
  done
  check "$label: the $others other ranks exited with status 1 ($good did)" \
    test "$others" -eq $((n - 1)) -a "$good" -eq "$others"
  check "$label: no rank process is left ($left)" test "$left" -eq 0
  # Nor any process started from this case's folder (the ranks' parents).
  procs=$(job_procs "prog-$label/stage")
  check "$label: no process of the job is left ($procs)" test "$procs" -eq 0
}

L4="--tp 2 --pp 2 --global-batch 4"
L8="--tp 2 --pp 2 --dp 2 --global-batch 8"
run error4 4 2 40 error "failed: SHARDC_FAULT: an error injected at step 40" $L4
run kill4 4 3 60 kill "was killed by signal 9 (SIGKILL) in step" $L4
run stop4 4 1 50 stop "stopped answering (the process is stopped)" $L4
run hang4 4 2 30 hang "made no progress for [0-9]* s in step 30" $L4
run error8 8 5 40 error "failed: SHARDC_FAULT: an error injected at step 40" $L8
run kill8 8 6 60 kill "was killed by signal 9 (SIGKILL) in step" $L8
run stop8 8 7 50 stop "stopped answering (the process is stopped)" $L8
run hang8 8 4 30 hang "made no progress for [0-9]* s in step 30" $L8
finish
