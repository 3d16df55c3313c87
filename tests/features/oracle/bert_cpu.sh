#!/bin/bash
# The cheap checks of models/bert.shard, in the default test set (the
# comparison with Hugging Face's BertForMaskedLM is hf_bert.sh, label long):
#
#   tests/features/oracle/bert_cpu.sh DATA
#
# 1. `shardc info` at the default shape counts BERT-base's masked-LM
#    109,514,298 parameters (BertForMaskedLM without the pooler);
# 2. a tiny shape trains 2 steps on one rank on masked-LM examples of the
#    bundled byte-level text, with the space (32) as the padding token so
#    that the key-padding mask drops many keys; the losses are the ones
#    recorded below (1e-4: the kernels are built for the machine, so the
#    last bits may move);
# 3. the same under --tp 2 gives the one-rank losses (1e-5);
# 4. without the padding token the losses differ (the mask is not inert);
# 5. bad input is an error at its line: a mask of the wrong shape, and a
#    mask input in a model whose loss does not ignore targets (the runtime
#    makes masks only for masked-LM models).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
DATA=$(cd "$OLDPWD" && realpath "$1")
export OMP_NUM_THREADS=1
fail=0

count=$("$SHARDC" info "$ROOT/models/bert.shard" | awk '$1 == "parameters" {print $2}' || true)
echo "bert parameters: $count (BertForMaskedLM, bert-base: 109,514,298)"
[ "$count" = "109,514,298" ] || { echo "FAIL: parameter count"; fail=1; }

TINY="-D vocab=256 -D seq=16 -D hidden=32 -D heads=4 -D layers=2 -D batch=4 -D init_std=0.1"
losses() { # ARGS...: the logged losses, one a line
  # shellcheck disable=SC2086
  "$SHARDC" run "$ROOT/models/bert.shard" $TINY --data "$DATA" --no-shuffle --steps 2 --quiet \
    --log-json l.jsonl "$@" >run.txt 2>&1 || { cat run.txt; echo "FAIL: $*"; exit 1; }
  sed 's/.*"loss":\([^,]*\),.*/\1/' l.jsonl
}
# within A B TOL WHAT: |A - B| <= TOL for each pair of lines
within() {
  paste "$1" "$2" | awk -v tol="$3" -v what="$4" '
    { d = $1 - $2; if (d < 0) d = -d; printf "  %s step %d: %.9f %.9f |diff| %.2e\n", what, NR, $1, $2, d
      if (d > tol) bad = 1 }
    END { exit bad }'
}
losses --mlm-pad-id 32 >one.txt
printf "5.7064624\n5.5917978\n" >expected.txt
within one.txt expected.txt 1e-4 "1 rank vs recorded" || { echo "FAIL: recorded loss"; fail=1; }
losses --mlm-pad-id 32 --tp 2 >tp2.txt
within one.txt tp2.txt 1e-5 "1 rank vs --tp 2" || { echo "FAIL: --tp 2"; fail=1; }
losses >nopad.txt
if within one.txt nopad.txt 1e-3 "padding vs none" >/dev/null; then
  echo "FAIL: the padding token changes nothing"; fail=1
else
  echo "  padding 32 vs none: the losses differ, as they must"
fi
# refused PATTERN SEDSCRIPT: the edited model fails to compile with PATTERN
refused() {
  sed "$2" "$ROOT/models/bert.shard" >bad.shard
  if "$SHARDC" compile bad.shard $TINY -o bad >bad.txt 2>&1; then
    echo "FAIL: compiled: $2"; fail=1
  elif grep -q "$1" bad.txt; then
    echo "  refused: $(grep -m1 error bad.txt)"
  else
    cat bad.txt; echo "FAIL: no '$1'"; fail=1
  fi
}
refused 'bad.shard:[0-9]*:[0-9]*: error: attention: mask\[4, 8\] must be \[b, s\] of the keys' \
  's/^input attention_mask: i32\[batch, seq\]/input attention_mask: i32[batch, 8]/'
refused 'bad.shard:[0-9]*:[0-9]*: error: cpu target: attention: the mask attention_mask is a model input' \
  's/cross_entropy(logits, labels, ignore=1)/cross_entropy(logits, labels)/'
[ $fail = 0 ] && echo "bert_cpu: PASS" || echo "bert_cpu: FAIL"
exit $fail
