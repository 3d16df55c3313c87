#!/bin/bash
# Bad tokenizer files and bad text are clear errors that name the file and
# the line (or the byte offset), with exit status 1, never a crash.
#   errors.sh WORKDIR
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
work=$1
rm -rf "$work" && mkdir -p "$work" && cd "$work"
printf 'Some text.\nMore text.\n' >text.txt

# A small valid vocabulary in GPT-2's format, to break one piece at a time.
/usr/bin/python3 - <<'PY'
import json
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
chars = [chr(c) for _, c in sorted(zip(bs, cs))]
vocab = {ch: i for i, ch in enumerate(chars)}
vocab["Te"] = 256; vocab["<|endoftext|>"] = 257
json.dump(vocab, open("vocab.json", "w"), ensure_ascii=False, indent=0)
open("merges.txt", "w").write("#version: 0.2\nT e\n")
# 70,000 tokens: every byte, every pair of bytes, then some triples.
import base64, itertools
with open("big.tiktoken", "w") as f:
    r = 0
    for k in (1, 2, 3):
        for t in itertools.product(range(256), repeat=k):
            f.write(base64.b64encode(bytes(t)).decode() + f" {r}\n")
            r += 1
            if r == 70000: break
        if r == 70000: break
PY

# expect NAME PATTERN COMMAND...: the command fails with status 1 and prints PATTERN.
expect() {
  local name=$1 pattern=$2
  shift 2
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [[ $rc -eq 1 && "$out" == *"$pattern"* ]]; then
    ok "$name: exit $rc: $out"
  else
    fail "$name: exit $rc, expected 1 and '$pattern'; got: $out"
  fi
}

data() { "$SHARDC" data text.txt -o out.bin "$@"; }

if data --tokenizer vocab.json,merges.txt >/dev/null; then
  ok "the valid vocabulary encodes the text"
else
  fail "the valid vocabulary is refused"
fi

sed '3s/$/ ,,/' vocab.json >broken.json
expect "vocab.json that is not JSON" "broken.json:3:" data --tokenizer broken.json,merges.txt
printf '{"a": 0}' >nobytes.json
expect "vocab.json without the byte tokens" "nobytes.json: the vocabulary has no token for byte 0x00" \
  data --tokenizer nobytes.json,merges.txt
sed 's/"Te": 256/"Te": 300/' vocab.json >gap.json
expect "vocab.json with a gap in its ids" "gap.json: no token has id 256" data --tokenizer gap.json,merges.txt
printf '{"\\u4e2d": 0}' >notbytes.json
expect "vocab.json with a token not in byte-level form" "is not in byte-level form" \
  data --tokenizer notbytes.json,merges.txt

printf '#version: 0.2\nT e\nq z\n' >unknown.txt
expect "merges.txt whose merged token is not in the vocabulary" \
  'unknown.txt:3: merge "q z": the merged token "qz" is not in the vocabulary' \
  data --tokenizer vocab.json,unknown.txt
printf 'T e\nTe\n' >oneword.txt
expect "merges.txt with one token on a line" "oneword.txt:2: expected two tokens separated by one space" \
  data --tokenizer vocab.json,oneword.txt
expect "a missing merges.txt" "missing.txt: No such file or directory" data --tokenizer vocab.json,missing.txt

printf '{"model": {"type": "WordPiece", "vocab": {}}}' >wordpiece.json
expect "tokenizer.json of another model" 'wordpiece.json: model type "WordPiece" is not supported' \
  data --tokenizer wordpiece.json
printf '{"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' >norm.json
expect "tokenizer.json with a normalizer" 'norm.json: a normalizer ("NFC") is not supported' \
  data --tokenizer norm.json
printf '{"model": {"type": "BPE", "vocab": {}, "merges": [' >cut.json
expect "tokenizer.json cut short" "cut.json:1:" data --tokenizer cut.json

head -300 big.tiktoken >bad.tiktoken
sed -i '200s/.*/@@@@ 199/' bad.tiktoken
expect "a tiktoken file with bad base64" "bad.tiktoken:200: expected \"BASE64 RANK\"" data --tokenizer bad.tiktoken
head -300 big.tiktoken | sed '250s/ 249$/ 12/' >twice.tiktoken
expect "a tiktoken file with a rank twice" "twice.tiktoken:250: rank 12 is given twice" data --tokenizer twice.tiktoken
expect "a vocabulary above 65,536 tokens" "a vocabulary of 70001 tokens does not fit llm.c's token shards" \
  data --tokenizer big.tiktoken

printf 'good text\nand then \xff\xfe bad\n' >bad_utf8.txt
expect "text that is not UTF-8" "bad_utf8.txt: invalid UTF-8 at byte offset 19 (byte 0xFF)" \
  "$SHARDC" data bad_utf8.txt -o out.bin --tokenizer vocab.json,merges.txt
# The shard being written when the error came is removed; none is left half written.
if compgen -G "out.bin.tmp.*" >/dev/null; then
  fail_tmp=$(ls out.bin.tmp.*)
  fail "a temporary shard is left behind: $fail_tmp"
else
  ok "no temporary shard is left behind"
fi
printf 'surrogate \xed\xa0\x80 here\n' >surrogate.txt
expect "an encoded surrogate" "surrogate.txt: invalid UTF-8 at byte offset 10 (byte 0xED)" \
  "$SHARDC" data surrogate.txt -o out.bin --bpe 300
expect "--bpe below 257" "--bpe: expected a vocabulary size in 257..65536" data --bpe 256
expect "--bpe above 65536" "--bpe: expected a vocabulary size in 257..65536" data --bpe 65537
expect "--tokenizer with --bpe" "--tokenizer and --bpe exclude each other" data --bpe 300 --tokenizer vocab.json,merges.txt
expect "--shard-tokens 1" "--shard-tokens: expected a count in 2..2147483647" data --shard-tokens 1

finish
