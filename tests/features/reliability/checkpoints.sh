#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# checkpoints.sh: --resume refuses a checkpoint of another
# model (another -D, another model file, other shapes) with one error that
# lists the differences, on one rank and on 4 (t=2 x p=2), and leaves the
# checkpoint as it was; --save never overwrites another model's
# checkpoint; a resumed run without --save saves into the folder it resumed
# from, and says so when it saves elsewhere.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
S="-D vocab=256 -D seq=8 -D heads=4 --microbatch 2"
GPT2="$ROOT/models/gpt2.shard $S"
corpus_shards
run() { "$SHARDC" run "$@" </dev/null; }
check "a 4-layer checkpoint at step 3" run $GPT2 -D hidden=16 -D layers=4 --out p4 \
  --data train.bin --steps 3 --save c4
cp -r c4 c4.orig

# refused LABEL FRAGMENT... -- COMMAND...: exit 1, one error naming every fragment,
# the checkpoint untouched.
refused() {
  label=$1; shift
  frags=
  while [ "$1" != "--" ]; do frags="$frags
$1"; shift; done
  shift
  st=0; "$@" >out.txt 2>&1 </dev/null || st=$?
  echo "      $label: exit $st:"
  { grep -A8 "^shardc: error" out.txt || true; } | { grep -v "^shardc: error: rank [0-9]* (" || true; } | sed 's/^/        /'
  check "$label: exit 1" test $st -eq 1
  # (under mpirun shardc run's own line about the failed rank repeats it)
  check "$label: one error" \
    test "$(grep 'another model' out.txt | grep -vc '^shardc: error: rank [0-9]* (')" -eq 1
  echo "$frags" | while read -r f; do
    [ -n "$f" ] || continue
    grep -qF -- "$f" out.txt || echo "missing: $f"
  done >missing.txt
  check "$label: it lists the differences" test ! -s missing.txt
  check "$label: the checkpoint is untouched" diff -r c4 c4.orig
}

refused "2 layers into the 4-layer checkpoint" \
  "-D layers: 4 in the checkpoint, 2 in this program" \
  "the checkpoint holds 52 weight tensors, this model 28" -- \
  run $GPT2 -D hidden=16 -D layers=2 --out p2 --resume c4 --steps 5
refused "another hidden size" "-D hidden: 16 in the checkpoint, 32 in this program" \
  "tensor wte.weight has shape [256, 16], the model expects [256, 32]" \
  "tensor h.0.attn.c_attn.weight has shape [16, 48], the model expects [32, 96]" -- \
  run $GPT2 -D hidden=32 -D layers=4 --out p32 --resume c4 --steps 5
refused "another model file" "model: 'gpt2' in the checkpoint, 'llama' in this program" -- \
  run "$ROOT/models/llama.shard" $S -D kv_heads=4 -D hidden=16 -D layers=4 --out pl --resume c4 --steps 5
refused "2 layers into 4 on 4 ranks (t=2 x p=2)" \
  "-D layers: 4 in the checkpoint, 2 in this program" -- \
  run $GPT2 -D hidden=16 -D layers=2 --tp 2 --pp 2 --global-batch 4 --out p2tp \
  --resume c4 --steps 5
refused "--save over another model's checkpoint" "--save will not overwrite it" \
  "-D layers: 4 in the checkpoint, 2 in this program" -- \
  run $GPT2 -D hidden=16 -D layers=2 --out p2 --data train.bin --steps 2 --save c4

# --resume DIR without --save saves into DIR; the folder the checkpoint's
# own run saved into (c4) is left alone.
cp -r c4 moved
st=0; run $GPT2 -D hidden=16 -D layers=4 --out p4 --resume moved --steps 5 >r.txt 2>&1 || st=$?
echo "      resumed from moved (written by a run that saved into c4): exit $st: $(grep -h 'saved\|note: saving' r.txt | tr '\n' ' ')"
check "a run resumed from moved saves into moved" grep -q "^saved moved (step 5)" r.txt
check "  ... with a note that its original run saved into c4" \
  grep -q "note: saving into moved, the folder resumed from (the run that wrote it saved into c4" r.txt
check "  ... and leaves c4 alone" diff -r c4 c4.orig
run $GPT2 -D hidden=16 -D layers=4 --out p4 --resume moved --steps 6 --save elsewhere >e.txt 2>&1 || true
check "--resume moved --save elsewhere says where it writes" \
  grep -q "note: this run resumes from moved and saves into elsewhere (--save)" e.txt
check "  ... and writes there" grep -q "^saved elsewhere (step 6)" e.txt
finish
