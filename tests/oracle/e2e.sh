#!/bin/bash
# Our training program against the PyTorch oracle, end to end:
#
#   tests/oracle/e2e.sh SHARDC gpt2|llama [WORKDIR]
#
# 1. a shard of random tokens with vocab 97 (odd: no power-of-two luck);
# 2. initial weights from our program (--steps 0 --save DIR);
# 3. 10 AdamW steps of ours from them (--init-from), 2 microbatches a step,
#    with --log-json and --dump-grads;
# 4. the same 10 steps by tests/oracle/oracle.py on the same weights and data;
# 5. compare.py: first loss within 1e-5, every gradient within 1e-4 (norm of
#    the difference over the norm), every loss within 1e-4.
#
# Shapes: gpt2.shard with head dim 16 and 3 layers; llama.shard with GQA
# (kv_heads 2 of 4 heads), rotary and SwiGLU. Exit 0 pass, 1 fail, 77 when
# PyTorch is missing (a skip for ctest). DTYPE=f64 runs both sides in f64.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PY:-/usr/bin/python3}
SHARDC=${1:?usage: e2e.sh SHARDC gpt2|llama [WORKDIR]}
MODEL=${2:?usage: e2e.sh SHARDC gpt2|llama [WORKDIR]}
DTYPE=${DTYPE:-f32}

if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "e2e: SKIP: no PyTorch for $PY (Debian package python3-torch)"
  exit 77
fi

case $MODEL in
gpt2) CONFIG="vocab=97,hidden=48,heads=3,layers=3" ;;
llama) CONFIG="vocab=97,hidden=64,heads=4,kv_heads=2,layers=2,ffn=88" ;;
*) echo "e2e: unknown model $MODEL (gpt2, llama)" >&2; exit 1 ;;
esac
SEQ=16 MICRO=2 GLOBAL=4 STEPS=10
DEFS=(-D "seq=$SEQ" -D "batch=$MICRO")
IFS=, read -ra kv <<<"$CONFIG"
for x in "${kv[@]}"; do DEFS+=(-D "$x"); done
OPT=(--lr 1e-2 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --clip 1.0
     --warmup 2 --lr-min 1e-3 --lr-schedule cosine --optimizer adamw)

if [[ -n ${3:-} ]]; then
  W=$3
  mkdir -p "$W"
else
  W=$(mktemp -d "${TMPDIR:-/tmp}/oracle-e2e.XXXXXX")
  trap 'rm -rf "$W"' EXIT
fi

run() { echo "+ $*" >&2; "$@"; }

run "$PY" "$HERE/shard_data.py" random --vocab 97 --tokens 50000 --seed 1 -o "$W/data.bin"
DTYPE_FLAG=()
[[ $DTYPE == f64 ]] && DTYPE_FLAG=(--dtype f64)
run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DTYPE_FLAG[@]}" "${DEFS[@]}" \
  --data "$W/data.bin" --steps 0 --save "$W/init"
run "$SHARDC" run "$ROOT/models/$MODEL.shard" "${DTYPE_FLAG[@]}" "${DEFS[@]}" \
  --init-from "$W/init/model.safetensors" --data "$W/data.bin" --no-shuffle \
  --global-batch "$GLOBAL" --steps "$STEPS" "${OPT[@]}" \
  --log-json "$W/ours.jsonl" --dump-grads "$W/ours.grads.safetensors"
run "$PY" "$HERE/oracle.py" --model "$MODEL" --config "$CONFIG" --dtype "$DTYPE" \
  --weights "$W/init/model.safetensors" --data "$W/data.bin" --no-shuffle \
  --batch "$MICRO" --seq "$SEQ" --global-batch "$GLOBAL" --steps "$STEPS" "${OPT[@]}" \
  --out "$W/oracle.json" --grads "$W/oracle.grads.safetensors"
run "$PY" "$HERE/compare.py" --log-json "$W/ours.jsonl" --dump-grads "$W/ours.grads.safetensors" \
  --oracle "$W/oracle.json" --oracle-grads "$W/oracle.grads.safetensors"
