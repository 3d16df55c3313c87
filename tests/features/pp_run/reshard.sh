#!/bin/bash
# reshard.sh TPTOOL: a checkpoint does not depend on the
# layout it was saved under.
#
# GPT-2 (tied embedding, padded vocabulary, 6 layers) trains 4 steps at
# t=2, p=2 (AdamW, global batch 16 of microbatch 2) and saves; then 2 more
# steps run from that checkpoint under
#   t=2 p=2 (the same layout: the reference), t=1 p=4, t=1 p=1 d=4 (and
#   with ZeRO-1), t=2 p=1 d=2 v=1 with ZeRO-1, p=2 v=2 interleaved,
# and each must give the reference's losses at steps 5 and 6 within 1e-5
# relative. Then a checkpoint saved under d=4 with ZeRO-1 (the optimizer
# state sharded over the replicas) must resume at t=2, p=2 the same way.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
TOOL=$(cd "$OLDPWD" && realpath "$1")
MODELS=$ROOT/models
DEFS="-D vocab=97 -D seq=8 -D hidden=16 -D heads=4 -D layers=6 -D batch=2"
"$TOOL" data data.bin 40000 61 || exit 1

# run NAME STEPS [FLAGS...]: trains; leaves NAME.json and NAME.out.
run() {
  name=$1 steps=$2 st=0
  shift 2
  # shellcheck disable=SC2086
  "$SHARDC" run "$MODELS/gpt2.shard" $DEFS --vocab-multiple 8 "$@" --data data.bin \
    --steps "$steps" --no-shuffle --global-batch 16 --lr 1e-2 --warmup 2 --log-every 1 \
    --log-json "$name.json" >"$name.out" 2>&1 </dev/null || st=$?
  [ $st -eq 0 ] && return 0
  fail "$name: exit $st"
  sed 's/^/      /' "$name.out" | tail -5
  return 1
}

loss_of_step() { sed -n "s/.*\"step\":$2,.*\"loss\":\([^,}]*\).*/\1/p" "$1.json"; }
relerr() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.1e", d / m }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# compare NAME REF: steps 5 and 6 of NAME against REF.
compare() {
  for s in 5 6; do
    a=$(loss_of_step "$1" $s) b=$(loss_of_step "$2" $s)
    e=$(relerr "$a" "$b" 2>/dev/null || true)
    if [ -n "$a" ] && [ -n "$b" ] && le "$e" 1e-5; then
      ok "$1: step $s loss $a vs $b (rel $e)"
    else
      fail "$1: step $s loss '$a' vs '$b' (rel $e)"
    fi
  done
}

# resume NAME [FLAGS...]: 2 more steps from the copy ck-NAME. A resumed run
# saves at its end where the checkpoint's flags say, so every copy is made
# before the first resume.
resume() {
  name=$1
  shift
  run "$name" 6 "$@" --resume "ck-$name"
}

run save 4 --tp 2 --pp 2 --save ck22 || finish
for name in same p4 d4 d4z t2d2z p2v2; do cp -r ck22 "ck-$name"; done
resume same --tp 2 --pp 2 || finish
for layout in "p4:--pp 4" "d4:--dp 4" "d4z:--dp 4 --zero 1" "t2d2z:--tp 2 --dp 2 --zero 1" \
  "p2v2:--pp 2 --vpp 2"; do
  name=${layout%%:*}
  # shellcheck disable=SC2086
  resume "$name" ${layout#*:} && compare "$name" same
done
# The other way: the optimizer state saved sharded over d = 4.
run savez 4 --dp 4 --zero 1 --save ckz || finish
for name in samez back; do cp -r ckz "ck-$name"; done
resume samez --dp 4 --zero 1 || finish
resume back --tp 2 --pp 2 && compare back samez
finish
