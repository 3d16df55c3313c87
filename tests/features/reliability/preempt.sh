#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# preempt.sh: SIGTERM or SIGINT to `shardc run` (one rank, and
# 4 ranks t=2 x p=2) lets the step in progress finish, writes the
# checkpoint of --save, and exits with status 75 (abi/job.h); the
# checkpoint resumes at the step the run stopped after. A second signal
# ends the run at once (status 128 + the signal).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 --microbatch 2"
corpus_shards

# Waits until the run (pid $1) prints that its slow step began (in $2).
started() {
  i=0
  while ! grep -q "^fault injected" "$2" && [ $i -lt 600 ]; do
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
    i=$((i + 1))
  done
}

signum() { case $1 in TERM) echo 15 ;; INT) echo 2 ;; esac; }

# case LABEL SIGNAL SLOW_RANK LAYOUT...: the signal comes during step
# $AT, which rank SLOW_RANK makes 3 s longer (SHARDC_FAULT=R:S:slow).
AT=20
case_of() {
  label=$1 sig=$2 rank=$3; shift 3
  common="$MODEL $* --out prog-$label --data train.bin --log-every 1000000"
  SHARDC_FAULT=$rank:$AT:slow "$SHARDC" run $common --steps 1000000 --save ck-$label \
    --log-json $label.json >$label.txt 2>&1 </dev/null &
  pid=$!
  started $pid $label.txt || true
  t0=$(date +%s.%N)
  kill -$sig $pid || true
  st=0; wait $pid || st=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  line=$(grep -m1 "^stopped by" $label.txt || true)
  echo "      $label: SIG$sig during step $AT: exit $st after $took s: $line"
  check "$label: exit status 75" test $st -eq 75
  check "$label: it finished step $AT, stopped after it and saved" \
    grep -q "^stopped by SIG$sig after step $AT of 1000000; saved ck-$label" $label.txt
  check "$label: the log holds steps 1 to $AT" test "$(grep -c . $label.json)" = "$AT"
  st=0; "$SHARDC" run $common --resume ck-$label --steps $((AT + 2)) >r-$label.txt 2>&1 </dev/null || st=$?
  check "$label: the checkpoint resumes at step $AT (exit $st)" \
    grep -q "resumed from ck-$label at step $AT\$" r-$label.txt
  # A second signal while the first waits for the step: out at once.
  SHARDC_FAULT=$rank:$AT:slow "$SHARDC" run $common --steps 1000000 --save ck2-$label \
    >$label-2.txt 2>&1 </dev/null &
  pid=$!
  started $pid $label-2.txt || true
  t0=$(date +%s.%N)
  kill -$sig $pid || true
  sleep 0.5
  kill -$sig $pid || true
  st=0; wait $pid || st=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  echo "      $label: two SIG$sig 0.5 s apart during the 3 s step: exit $st after $took s"
  check "$label: the second signal exits at once with 128 + the signal, saving nothing" \
    sh -c "[ $st -eq $((128 + $(signum $sig))) ] && [ \$(echo '$took < 2' | bc) -eq 1 ] && [ ! -e ck2-$label/state.safetensors ] && [ ! -e ck2-$label/model.safetensors ]"
}

case_of one TERM 0
case_of one-int INT 0
case_of tp2pp2 TERM 1 --tp 2 --pp 2 --global-batch 4
case_of tp2pp2-int INT 2 --tp 2 --pp 2 --global-batch 4
finish
