#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# nan_update.sh: a non-finite state is never trained on nor
# saved, and a run that keeps dropping updates does not end well.
# - An update that leaves a NaN in the weights (SHARDC_FAULT=R:S:nan-update,
#   runtime/main.c), with --save-every 1: the run stops at that step with
#   exit 1 under --on-nan stop and skip alike, naming the parameter, and
#   the checkpoint left is the step before, finite (it loads).
# - --lr 1e14 under --on-nan skip: every later update is dropped; the run
#   stops with exit 1 once more than --max-skipped (3) were, and saves
#   nothing non-finite.
# - --max-skipped 0: one dropped update ends the run; the default lets one
#   pass (exit 0).
# - A NaN in an --init-from file: refused at load, naming the tensor.
# On one rank and on 4 (t=2 x p=2, the fault on the last stage).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 --microbatch 2"
corpus_shards
AT=4
meta() { python3 "$ROOT/tests/features/reliability/st_meta.py" "$@"; }

case_of() {
  label=$1 rank=$2; shift 2
  common="$MODEL $* --out prog-$label --data train.bin --steps 8 --log-every 1"
  for mode in stop skip; do
    st=0
    SHARDC_FAULT=$rank:$AT:nan-update "$SHARDC" run $common --on-nan $mode --save-every 1 \
      --save ck-$label-$mode >u-$label-$mode.txt 2>&1 </dev/null || st=$?
    name=$(sed -n 's/^fault injected: NaN in the weights of //p' u-$label-$mode.txt)
    msg=$(grep -m1 "the update made" u-$label-$mode.txt || true)
    echo "      $label $mode: NaN in the weights of $name after update $AT: exit $st"
    echo "      $msg"
    check "$label $mode: exit 1" test $st -eq 1
    check "$label $mode: the message names step $AT and $name" \
      grep -qF "step $AT: the update made the weights of $name non-finite" u-$label-$mode.txt
    saved=$(meta ck-$label-$mode/state.safetensors step || true)
    echo "      $label $mode: the checkpoint left is of step $saved"
    check "$label $mode: the checkpoint left is step $((AT - 1))" test "$saved" = $((AT - 1))
    check "$label $mode: and it loads (every tensor finite, checksums right)" \
      "$SHARDC" run $MODEL --out prog-one --steps 0 --init-from ck-$label-$mode/model.safetensors
  done
  st=0
  "$SHARDC" run $common --lr 1e14 --on-nan skip --save-every 1 --save big-$label \
    >big-$label.txt 2>&1 </dev/null || st=$?
  dropped=$(grep "the update is dropped" big-$label.txt | grep -o "step [0-9]*:" | sort -u | wc -l || true)
  { grep "the update is dropped" big-$label.txt || true; } | cut -c1-110 | sed 's/^/        /' 
  echo "      $label --lr 1e14 --on-nan skip: exit $st, $dropped updates dropped: $(grep -m1 'max-skipped' big-$label.txt)"
  check "$label --lr 1e14: exit 1 once more than 3 updates were dropped" \
    sh -c "[ $st -eq 1 ] && [ $dropped -eq 4 ] && grep -q 'more than --max-skipped 3' big-$label.txt"
  st=0
  SHARDC_FAULT=$rank:$AT:nan "$SHARDC" run $common --on-nan skip --max-skipped 0 \
    >m0-$label.txt 2>&1 </dev/null || st=$?
  echo "      $label --max-skipped 0, one NaN gradient: exit $st: $(grep -m1 'max-skipped' m0-$label.txt)"
  check "$label --max-skipped 0: one dropped update ends the run" \
    sh -c "[ $st -eq 1 ] && grep -q 'stopped at step $AT: 1 updates were dropped, more than --max-skipped 0' m0-$label.txt"
}

case_of one 0
case_of tp2pp2 3 --tp 2 --pp 2 --global-batch 4

# A NaN written into a checkpoint by hand (its checksum no longer matches:
# --no-verify, so that the finiteness check is what refuses it).
check "a checkpoint to spoil" "$SHARDC" run $MODEL --out prog-one --data train.bin --steps 2 --save good
python3 - good/model.safetensors bad.safetensors <<'PY'
import json, struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
b, _ = h["h.2.mlp.c_fc.weight"]["data_offsets"]
d[8 + n + b + 12:8 + n + b + 16] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(d)
PY
expect_error "--init-from with a NaN (element 3 of h.2.mlp.c_fc.weight): refused by its checksum" \
  "tensor h.2.mlp.c_fc.weight does not match its checksum" \
  "$SHARDC" run $MODEL --out prog-one --steps 0 --init-from bad.safetensors
expect_error "  and with --no-verify by its value, naming the tensor" \
  "bad.safetensors: tensor h.2.mlp.c_fc.weight holds a NaN or an infinity (element 3)" \
  "$SHARDC" run $MODEL --out prog-one --steps 0 --init-from bad.safetensors --no-verify
expect_error "  on 4 ranks too" "tensor h.2.mlp.c_fc.weight holds a NaN or an infinity" \
  "$SHARDC" run $MODEL --out prog-tp2pp2 --tp 2 --pp 2 --global-batch 4 --steps 0 \
  --init-from bad.safetensors --no-verify
finish
