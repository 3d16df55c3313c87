#!/bin/bash
# The ids of the adversarial file, without Python: `shardc data --bpe 2000`
# learns a vocabulary on the adversarial file and the corpus, then encodes
# the adversarial file with it. The shard's checksum is the one of a run
# that hf_match.py found equal, token for token, to tokenizers' ids on the
# same vocabulary, so a change in the trainer, the pre-tokenisation or the
# merges shows here even where tokenizers is not installed. Then the
# corpus is encoded in chunks of 4 MiB and of 64 bytes, with --val: the
# shards must be the same.
#   golden.sh DATA_DIR WORKDIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
data=$1
work=$2
expected_tokens=1830
expected_md5=e0ffca223580ffe270f74ab37c2ef29f
rm -rf "$work" && mkdir -p "$work" && cd "$work"
cat "$data/tokenizer_adversarial.txt" "$data/corpus.txt" >train.txt
"$SHARDC" data train.txt -o vocab.bin --bpe 2000 >/dev/null
"$SHARDC" data "$data/tokenizer_adversarial.txt" -o adv.bin --tokenizer vocab.tokenizer.json
tokens=$(od -An -t d4 -j 8 -N 4 adv.bin | tr -d ' ')
md5=$(md5sum adv.bin | cut -d' ' -f1)
echo "adversarial file: $tokens tokens (expected $expected_tokens), md5 $md5 (expected $expected_md5)"
if [[ $tokens == "$expected_tokens" && $md5 == "$expected_md5" ]]; then
  ok "the adversarial file's ids are the recorded ones"
else
  fail "the ids changed; if on purpose, check them with hf_match.py and record the new values"
fi
# The same shards whatever the chunks the text is read in, --val included.
"$SHARDC" data "$data/corpus.txt" -o big.bin --val big_val.bin --tokenizer vocab.tokenizer.json >/dev/null
SHARDC_DATA_CHUNK_BYTES=64 "$SHARDC" data "$data/corpus.txt" -o small.bin --val small_val.bin \
  --tokenizer vocab.tokenizer.json >/dev/null
if cmp -s big.bin small.bin && cmp -s big_val.bin small_val.bin; then
  ok "chunks of 4 MiB and of 64 bytes give the same shards: $(md5sum <big.bin | cut -c1-12), $(md5sum <big_val.bin | cut -c1-12)"
else
  fail "chunks of 64 bytes give other shards than chunks of 4 MiB"
fi
finish
