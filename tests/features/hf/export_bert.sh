#!/bin/bash
# shellcheck disable=SC2086 # the -D list is a list of words
# `shardc export --hf` of models/bert.shard, loaded by transformers'
# BertForMaskedLM.from_pretrained: no tensor missing or unexpected, every
# tensor equal to the checkpoint's, the decoder tied to the word
# embeddings, config.json's shape and epsilon read back (export_bert.py).
# Skips (exit 77), saying why, without transformers.
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"

PY=
for py in "${SHARDC_PYENV:-$SHARDC_BUILD/pyenv}/bin/python" python3; do
  if "$py" -c 'import torch, transformers' 2>/dev/null; then PY=$py; break; fi
done
if [ -z "$PY" ]; then
  echo "SKIP: no python that imports torch and transformers; scripts/install-deps.sh installs them into build/pyenv"
  exit 77
fi

BERT="-D vocab=256 -D hidden=32 -D heads=4 -D layers=2 -D seq=16 --microbatch 2"
corpus_shards
check "bert: 2 steps, saved" "$SHARDC" run "$ROOT/models/bert.shard" $BERT --out prog --data train.bin \
  --steps 2 --save ck
check "export bert" "$SHARDC" export ck --hf hf-bert
if "$PY" "$ROOT/tests/features/hf/export_bert.py" hf-bert ck/model.safetensors >load.txt 2>&1; then
  ok "transformers loads the export, every tensor equal"
else
  fail "transformers' load of the export"
fi
grep -v "^Some weights\|^- This IS\|^- This is NOT" load.txt | sed 's/^/      /'
grep -q '"architectures":[[:space:]]*\[[[:space:]]*"BertForMaskedLM"' hf-bert/config.json ||
  fail "config.json names BertForMaskedLM"
finish
