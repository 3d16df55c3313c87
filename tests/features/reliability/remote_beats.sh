#!/bin/bash
# remote_beats.sh: the heartbeats of ranks on other machines than the
# launcher's come over the launcher's socket (abi/job.h: JOB_BEAT_ENV), so
# that a shared file system that delays their records neither delays their
# beats nor gets a healthy job killed, and a rank that stops beating is
# still found. Each rank here says it runs elsewhere (SHARDC_TEST_HOST):
# it maps no slot of the shared memory, and the launcher cannot probe its
# process. Two ranks (p=2):
#   slow   --timeout 2, and every record write blocks 3 s first
#          (SHARDC_TEST_RECORD_STALL), longer than --timeout; the job trains
#          its 20,000 steps to the end (longer than 3 s) and exits 0;
#   stop   --timeout 5, rank 1 stops itself (SIGSTOP) at step 2000, with records on
#          time and (stop-slow) 6 s late; the job ends with
#          exit 1 and one message: no heartbeat, within --timeout + 2 s (the
#          launcher cannot kill a rank of another machine by its id: it waits
#          a second for mpirun, then kills mpirun's process group), and
#          rank 0 exits with status 1, told to stop over the socket;
#          stop-slow6 does the same with the launcher's socket named by its
#          IPv6 address, ::1 (SHARDC_TEST_BEAT_HOST), where this machine has
#          IPv6: beats and the stop travel over IPv6.
# Prints each case's exit status, time and message.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
. "$ROOT/tests/features/reliability/job_procs.sh"
TIMEOUT=5 SLOW_TIMEOUT=2
MODEL=("$ROOT/models/gpt2.shard" -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=2
       --microbatch 2 --pp 2 --global-batch 4)
corpus_shards

# The pids of the case's records, killed if any is left (a stopped rank
# the launcher could not kill by its id: it is "elsewhere").
# A rank killed as its parent dies (PR_SET_PDEATHSIG) goes a moment after
# the launcher exits, so each is given 3 s; a zombie has gone.
alive() {
  local state
  state=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null || true)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
leftovers() {
  local left=0 rec pid tries
  for rec in "prog-$1"/job-*/rank-*; do
    case $rec in *.exit | *.end) continue ;; esac
    pid=$(sed -n 's/^pid //p' "$rec")
    [ -n "$pid" ] || continue
    for tries in $(seq 30); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      left=$((left + 1))
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  echo "$left"
}

# slow: records that come 3 s late, beats on time.
t0=$(date +%s.%N)
st=0
SHARDC_JOB_KEEP=1 SHARDC_TEST_HOST=elsewhere SHARDC_TEST_RECORD_STALL=3 timeout 120 \
  "$SHARDC" run "${MODEL[@]}" --out prog-slow --data train.bin --steps 20000 --quiet \
  --timeout $SLOW_TIMEOUT >slow.txt 2>&1 </dev/null || st=$?
took=$(echo "$(date +%s.%N) - $t0" | bc)
echo "      slow: exit $st after $took s"
sed 's/^/      /' slow.txt | grep -i 'error' | head -3 || true
check "slow: records 3 s late, --timeout $SLOW_TIMEOUT: the job trains to its end (exit $st)" \
  test "$st" -eq 0
check "slow: it ran longer than the record's delay ($took s > 3 s)" \
  sh -c "[ \$(echo '$took > 3' | bc) -eq 1 ]"
check "slow: no rank was blamed" sh -c "! grep -q 'shardc: error: rank' slow.txt"
rec=$(ls prog-slow/job-*/rank-1 2>/dev/null | head -1 || true)
check "slow: rank 1's record says it ran elsewhere" grep -q '^host elsewhere$' "$rec"

# stop LABEL STALL: a rank elsewhere that stops beating, its records'
# writes blocked STALL s first; the other rank must exit with status 1
# (told by the datagram the launcher sends back: its record's thread,
# which would see the abort file, is blocked when STALL is set).
stop() {
  local label=$1 stall=$2 st=0 end at took msg left
  SHARDC_TEST_BEAT_HOST=${3:-} SHARDC_JOB_KEEP=1 SHARDC_TEST_HOST=elsewhere SHARDC_TEST_RECORD_STALL=$stall \
    SHARDC_FAULT=1:2000:stop timeout 120 \
    "$SHARDC" run "${MODEL[@]}" --out "prog-$label" --data train.bin --steps 1000000 --quiet \
    --timeout $TIMEOUT >"$label.txt" 2>&1 </dev/null || st=$?
  end=$(date +%s.%N)
  at=$(sed -n 's/^fault injected: .* at \([0-9.]*\)$/\1/p' "$label.txt")
  took=$(echo "$end - ${at:-$end}" | bc)
  msg=$({ grep '^shardc: error: rank 1 (' "$label.txt" || true; })
  echo "      $label: exit $st after $took s from the fault"
  echo "      $msg"
  check "$label: exit status 1" test "$st" -eq 1
  check "$label: the fault happened" test -n "$at"
  check "$label: the job ended within --timeout $TIMEOUT + 2 s ($took s)" \
    sh -c "[ \$(echo '$took <= $TIMEOUT + 2' | bc) -eq 1 ]"
  check "$label: one message: rank 1 stopped answering, no heartbeat" \
    sh -c "[ \$(grep -c '^shardc: error: rank [0-9]* (' '$label.txt') -eq 1 ] &&
           echo '$msg' | grep -q 'rank 1 (tp=0 pp=1 dp=0, program stage1) stopped answering: no heartbeat for'"
  check "$label: rank 0 exited with status 1" sh -c "echo '$msg' | grep -q 'ranks 0 exited with status 1'"
  left=$(leftovers "$label")
  check "$label: no rank process was left ($left killed here)" test "$left" -eq 0
}
stop stop 0
stop stop-slow 6
if python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).bind(("::1", 0))' \
   2>/dev/null; then
  stop stop-slow6 6 ::1
else
  echo "      stop-slow6: skipped, this machine has no IPv6 loopback"
fi
finish
