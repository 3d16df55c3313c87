#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# nan.sh: a NaN put into one gradient (SHARDC_FAULT=R:S:nan,
# runtime/main.c) on one rank and on 4 ranks (t=2 x p=2, the NaN on the
# last stage): with --on-nan stop (the default) the run ends with exit 1
# and a message naming the step and the parameter whose gradient went
# non-finite; with --on-nan skip the step's update is dropped, the step
# counts, the run goes on to the end with finite losses, and the losses up
# to the step are those of a clean run to the bit.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 --microbatch 2"
corpus_shards
STEPS=8
AT=4

# case LABEL FAULT_RANK LAYOUT...
case_of() {
  label=$1 rank=$2; shift 2
  common="$MODEL $* --out prog-$label --data train.bin --steps $STEPS --log-every 1"
  "$SHARDC" run $common --log-json clean-$label.json >clean-$label.txt 2>&1 </dev/null ||
    { fail "$label: the clean run: exit $?"; tail -3 clean-$label.txt; }
  st=0; SHARDC_FAULT=$rank:$AT:nan "$SHARDC" run $common >stop-$label.txt 2>&1 </dev/null || st=$?
  name=$(sed -n 's/^fault injected: NaN in the gradient of //p' stop-$label.txt)
  msg=$(grep -m1 "first non-finite gradient" stop-$label.txt || true)
  echo "      $label stop: NaN at step $AT in $name on rank $rank: exit $st"
  echo "      $msg"
  check "$label stop: exit status 1" test $st -eq 1
  check "$label stop: the message names step $AT and $name" \
    sh -c "echo '$msg' | grep -qF 'step $AT: the gradient norm is nan; the first non-finite gradient is that of $name (pipeline stage'"
  check "$label stop: no step after $AT ran" sh -c "! grep -q '^step $((AT + 1))/' stop-$label.txt"
  st=0
  SHARDC_FAULT=$rank:$AT:nan "$SHARDC" run $common --on-nan skip --log-json skip-$label.json \
    >skip-$label.txt 2>&1 </dev/null || st=$?
  echo "      $label skip: exit $st: $(grep -m1 'note: the updates' skip-$label.txt)"
  check "$label skip: exit status 0" test $st -eq 0
  check "$label skip: the step is reported, its update dropped" \
    grep -qF "step $AT: the gradient norm is nan; the first non-finite gradient is that of $name" skip-$label.txt
  check "$label skip: all $STEPS steps ran" test "$(grep -c . skip-$label.json)" -eq $STEPS
  losses clean-$label.json | head -$AT >a.loss
  losses skip-$label.json | head -$AT >b.loss
  check "$label skip: the losses of steps 1 to $AT equal the clean run's to the bit" cmp a.loss b.loss
  last=$(losses skip-$label.json | tail -1)
  echo "      $label skip: last loss $last (clean run: $(losses clean-$label.json | tail -1))"
  check "$label skip: the last loss is finite" sh -c "echo '$last' | grep -q '^[0-9]'"
}

case_of one 0
case_of tp2pp2 3 --tp 2 --pp 2 --global-batch 4
finish
