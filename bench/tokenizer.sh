#!/bin/bash
# Encoding speed of shardc's byte-level BPE against Hugging Face's tokenizers,
# both on one thread, on the same text and vocabulary in the same run; prints
# the ratio and fails when shardc is slower or the ids differ.
#   bench/tokenizer.sh [VOCAB_SIZE [COPIES]]   (defaults 32768 and 5)
# Needs build/shardc (make) and the Python packages of scripts/install-deps.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$root/tests/tokenizer/python.sh" "$root/bench/tokenizer.py" "$root/build/shardc" \
  "$root/data/corpus.txt" "$work" "$@"
