#!/bin/bash
# Training on BPE tokens and sampling text: `shardc data --bpe` writes the
# shards and the tokenizer beside them, a tiny GPT-2 trains 20 steps on
# them, and `shardc sample` finds the tokenizer through the checkpoint's
# --data, encodes the prompt, and decodes what the program generates. The
# same seed gives the same text, --tokenizer names the tokenizer by hand,
# and the program itself takes and prints ids with --sample-ids.
#   sample.sh CORPUS WORKDIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
corpus=$1
work=$2
model=$ROOT/models/gpt2.shard
rm -rf "$work" && mkdir -p "$work" && cd "$work"
head -c 300000 "$corpus" >text.txt
"$SHARDC" data text.txt -o train.bin --bpe 400
if [[ -f train.tokenizer && -f train.tokenizer.json ]]; then
  ok "train.tokenizer and train.tokenizer.json beside the shards"
else
  fail "no train.tokenizer(.json) beside the shards"
fi
shape=(-D layers=1 -D hidden=32 -D heads=2 -D seq=32 -D vocab=400)
"$SHARDC" run "$model" "${shape[@]}" --microbatch 4 --data train.bin \
  --steps 20 --lr 3e-3 --save ck --quiet
prompt="It is a truth universally acknowledged"
one=$("$SHARDC" sample ck --prompt "$prompt" --tokens 40 --seed 7) || fail "shardc sample exited $?"
two=$("$SHARDC" sample ck --prompt "$prompt" --tokens 40 --seed 7)
three=$("$SHARDC" sample ck --prompt "$prompt" --tokens 40 --seed 7 --tokenizer train.tokenizer.json)
echo "sample: $one"
if [[ $one == "$prompt"* ]] && (( ${#one} > ${#prompt} + 20 )); then
  ok "the sample starts with the prompt and goes on: ${#one} bytes, the prompt ${#prompt}"
else
  fail "the sample is ${#one} bytes long, the prompt ${#prompt}, or does not start with it"
fi
if [[ $one == "$two" ]]; then ok "the same seed gives the same text"; else fail "the same seed gave another text"; fi
if [[ $one == "$three" ]]; then ok "--tokenizer gives the same text"; else fail "--tokenizer gave another text"; fi
# A tokenizer larger than the model's vocabulary is refused.
"$SHARDC" data text.txt -o big.bin --bpe 500 >/dev/null
rc=0
out=$("$SHARDC" sample ck --tokenizer big.tokenizer.json 2>&1) || rc=$?
if [[ $rc -eq 1 && $out == *"the tokenizer has 500 tokens, the model's vocabulary 400"* ]]; then
  ok "a larger tokenizer is refused: $out"
else
  fail "a larger tokenizer: exit $rc: $out"
fi
# Numbered shards, read back through a glob: the tokenizer is still found.
"$SHARDC" data text.txt -o shards.bin --bpe 400 --shard-tokens 50000 >/dev/null
"$SHARDC" run "$model" "${shape[@]}" --microbatch 4 --data 'shards_*.bin' --steps 2 --save ck2 --quiet
glob=$("$SHARDC" sample ck2 --prompt "$prompt" --tokens 10 --seed 7)
direct=$("$SHARDC" sample ck2 --prompt "$prompt" --tokens 10 --seed 7 --tokenizer shards.tokenizer.json)
echo "sample after 'shards_*.bin': $glob"
if [[ $glob == "$direct" ]]; then
  ok "the tokenizer of 'shards_*.bin' is found"
else
  fail "the tokenizer of 'shards_*.bin': '$glob' against '$direct'"
fi
# The program: ids in, ids out, each below the vocabulary.
programs=(.shardc/*/rank0)
program=${programs[0]}
ids=$("$program" --init-from ck/model.safetensors --steps 0 --quiet --sample-prompt "1 2 300" --sample-ids \
  --sample-tokens 10 2>&1)
count=$(grep -cE '^[0-9]+$' <<<"$ids" || true)
big=$(awk '$1 >= 400' <<<"$ids" | wc -l)
echo "the program printed $count ids, $big of them at or above the vocabulary of 400"
if [[ $count -eq 10 && $big -eq 0 ]]; then ok "--sample-ids: 10 ids below 400"; else fail "--sample-ids printed: $ids"; fi
rc=0
bad=$("$program" --init-from ck/model.safetensors --steps 0 --quiet --sample-prompt "1 x" --sample-ids 2>&1) || rc=$?
if [[ $rc -ne 0 && $bad == *"expected token ids"* ]]; then
  ok "a bad id list is refused: $bad"
else
  fail "a bad id list: exit $rc: $bad"
fi
finish
