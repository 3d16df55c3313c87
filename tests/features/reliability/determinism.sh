#!/bin/bash
# shellcheck disable=SC2086 # flag lists are lists of words
# determinism.sh: the same command twice logs the same losses
# and gradient norms to the last bit, on the CPU target, for one rank and
# the layouts t=2, t=2 with sequence parallelism, p=2 (gpipe), p=2 with
# v=2 (interleaved), d=2, d=2 with ZeRO-1 and t=2 x p=2 x d=2 (dropout on,
# shuffled data, AdamW, clipping), and for a LLaMA-style model on one rank
# and t=2 x p=2 (another set of kernels: RMSNorm, rotary embeddings,
# SwiGLU, grouped heads).
set -euo pipefail
. "$SHARDC_SRC/tests/common/checks.sh"
MODEL="$ROOT/models/gpt2.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D layers=4 -D dropout_rate=0.1 --microbatch 2"
corpus_shards
C="--data train.bin --steps 8 --global-batch 8 --clip 0.5 --quiet"

twice() {
  label=$1; shift
  for k in 1 2; do
    "$SHARDC" run ${ALT_MODEL:-$MODEL} "$@" --out prog-$label $C --log-json $label-$k.json >$label-$k.txt 2>&1 </dev/null ||
      { fail "$label: run $k: exit $?"; tail -3 $label-$k.txt; return; }
    strip_timing $label-$k.json >$label-$k.clean
  done
  echo "      $label: losses $(losses $label-1.json | head -3 | tr '\n' ' ')..."
  check "$label: two runs log the same losses and gradient norms, every bit" cmp $label-1.clean $label-2.clean
}

twice one
twice tp2 --tp 2
twice tp2sp --tp 2 --sequence-parallel
twice pp2gpipe --pp 2 --schedule gpipe
twice pp2v2 --pp 2 --vpp 2
twice dp2 --dp 2
twice dp2zero --dp 2 --zero 1
twice tp2pp2dp2 --tp 2 --pp 2 --dp 2
ALT_MODEL="$ROOT/models/llama.shard -D vocab=256 -D seq=8 -D hidden=16 -D heads=4 -D kv_heads=2 -D ffn=32 -D layers=2 --microbatch 2"
twice llama-one
twice llama-tp2pp2 --tp 2 --pp 2
finish
