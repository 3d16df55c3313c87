# shellcheck shell=bash
# What the launch tests share: the shape, the one-rank reference and the
# comparison of losses, as tests/features/pp_run/grid.sh makes them (within 1e-5
# relative at step 1 and 1e-4 at the last step). Sourced after
# tests/common/checks.sh, with TOOL set.
M="$ROOT/models/gpt2.shard"
DEFS="-D vocab=97 -D seq=8 -D hidden=16 -D heads=4 -D layers=9 -D batch=2"
STEPS=10
GB=16
# The training options of every run; the log's name comes last.
TRAIN="--data data.bin --steps $STEPS --no-shuffle --global-batch $GB --lr 1e-2 --log-every $STEPS"

loss_at() { sed -n "$2p" "$1" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.1e", d / m }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# reference: the data and the one-rank losses R1 and RN.
reference() {
  "$TOOL" data data.bin 40000 61 >/dev/null || { fail "tptool data"; finish; }
  # shellcheck disable=SC2086
  if ! "$SHARDC" run "$M" $DEFS --vocab-multiple 8 --out prog-ref $TRAIN --log-json ref.json \
    >ref.out 2>&1 </dev/null; then
    fail "one rank: exit $?"
    tail -5 ref.out
    finish
  fi
  R1=$(loss_at ref.json 1) RN=$(loss_at ref.json $STEPS)
  echo "one rank: loss@1 $R1, loss@$STEPS $RN ($STEPS steps, global batch $GB)"
}

# compare WHAT LOG: the run's losses against the one rank's.
compare() {
  if [ ! -s "$2" ]; then
    fail "$1: no log $2"
    return
  fi
  l1=$(loss_at "$2" 1) ln=$(loss_at "$2" $STEPS)
  e1=$(relerr "$l1" "$R1" 2>/dev/null || true) en=$(relerr "$ln" "$RN" 2>/dev/null || true)
  if le "$e1" 1e-5 && le "$en" 1e-4; then
    ok "$1: loss@1 $l1 (rel $e1), loss@$STEPS $ln (rel $en)"
  else
    fail "$1: loss@1 $l1 (rel $e1, limit 1e-5), loss@$STEPS $ln (rel $en, limit 1e-4)"
  fi
}
