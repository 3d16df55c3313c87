#!/bin/bash
# Training on BPE tokens and sampling text: `shardc data --bpe` writes the
# shards and the tokenizer beside them, a tiny GPT-2 trains 20 steps on
# them, and `shardc sample` finds the tokenizer through the checkpoint's
# --data, encodes the prompt, and decodes what the program generates. The
# same seed gives the same text, --tokenizer names the tokenizer by hand,
# and the program itself takes and prints ids with --sample-ids.
#   sample.sh SHARDC CORPUS WORKDIR
set -u
shardc=$1
corpus=$2
work=$3
model=$(cd "$(dirname "$0")/../../models" && pwd)/gpt2.shard
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
head -c 300000 "$corpus" >text.txt
"$shardc" data text.txt -o train.bin --bpe 400 || exit 1
[[ -f train.tokenizer && -f train.tokenizer.json ]] || fail "no train.tokenizer(.json) beside the shards"
shape=(-D layers=1 -D hidden=32 -D heads=2 -D seq=32 -D vocab=400)
"$shardc" run "$model" "${shape[@]}" --microbatch 4 --data train.bin \
  --steps 20 --lr 3e-3 --save ck --quiet || exit 1
prompt="It is a truth universally acknowledged"
one=$("$shardc" sample ck --prompt "$prompt" --tokens 40 --seed 7) || fail "shardc sample exited $?"
two=$("$shardc" sample ck --prompt "$prompt" --tokens 40 --seed 7)
three=$("$shardc" sample ck --prompt "$prompt" --tokens 40 --seed 7 --tokenizer train.tokenizer.json)
echo "sample: $one"
[[ $one == "$prompt"* ]] || fail "the sample does not start with the prompt"
(( ${#one} > ${#prompt} + 20 )) || fail "the sample is ${#one} bytes long, the prompt ${#prompt}"
[[ $one == "$two" ]] && echo "ok   the same seed gives the same text" || fail "the same seed gave another text"
[[ $one == "$three" ]] && echo "ok   --tokenizer gives the same text" || fail "--tokenizer gave another text"
# A tokenizer larger than the model's vocabulary is refused.
"$shardc" data text.txt -o big.bin --bpe 500 >/dev/null || exit 1
out=$("$shardc" sample ck --tokenizer big.tokenizer.json 2>&1)
[[ $? -eq 1 && $out == *"the tokenizer has 500 tokens, the model's vocabulary 400"* ]] &&
  echo "ok   a larger tokenizer is refused: $out" || fail "a larger tokenizer: $out"
# Numbered shards, read back through a glob: the tokenizer is still found.
"$shardc" data text.txt -o shards.bin --bpe 400 --shard-tokens 50000 >/dev/null || exit 1
"$shardc" run "$model" "${shape[@]}" --microbatch 4 --data 'shards_*.bin' --steps 2 --save ck2 --quiet || exit 1
glob=$("$shardc" sample ck2 --prompt "$prompt" --tokens 10 --seed 7)
direct=$("$shardc" sample ck2 --prompt "$prompt" --tokens 10 --seed 7 --tokenizer shards.tokenizer.json)
echo "sample after 'shards_*.bin': $glob"
[[ $glob == "$direct" ]] && echo "ok   the tokenizer of 'shards_*.bin' is found" ||
  fail "the tokenizer of 'shards_*.bin': '$glob' against '$direct'"
# The program: ids in, ids out, each below the vocabulary.
program=$(ls -d .shardc/*/rank0 | head -1)
ids=$("$program" --init-from ck/model.safetensors --steps 0 --quiet --sample-prompt "1 2 300" --sample-ids \
  --sample-tokens 10 2>&1)
count=$(grep -cE '^[0-9]+$' <<<"$ids")
big=$(awk '$1 >= 400' <<<"$ids" | wc -l)
echo "the program printed $count ids, $big of them at or above the vocabulary of 400"
[[ $count -eq 10 && $big -eq 0 ]] || fail "--sample-ids printed: $ids"
bad=$("$program" --init-from ck/model.safetensors --steps 0 --quiet --sample-prompt "1 x" --sample-ids 2>&1)
[[ $? -ne 0 && $bad == *"expected token ids"* ]] && echo "ok   a bad id list is refused: $bad" ||
  fail "a bad id list: $bad"
if [[ $fails -ne 0 ]]; then
  echo "FAIL: $fails checks"
  exit 1
fi
echo "all sample checks passed"
